// test/fuzz.cpp — libFuzzer harnesses for every reader of outside data, in one binary that
// dispatches by harness name (ZT_FUZZ_HARNESS, or the first argument before libFuzzer's own):
//
//   test/fuzz model  [libFuzzer flags] [corpus]   an llm.c model file: model_file_open + fill
//   test/fuzz shard  ...                          a token shard: dataloader_init + every batch
//   test/fuzz state  ...                          a state file: old_state_open + fill, R = 1
//   test/fuzz tokenizer ...                       llm.c's tokenizer file: tokenizer_init + decode
//   test/fuzz bpe    ...                          the encoder: decode(encode(x)) == x, and the
//                                                 text encoded in two parts == encoded whole
//   test/fuzz safetensors ...                     model.safetensors beside a fixed config.json (L 1,
//                                                 C 8, NH 2, V 16, maxT 8): hf_open + hf_bind (must
//                                                 bind) + hf_fill whole == hf_fill in pieces; and
//                                                 the strict JSON parser on the same bytes
//   test/fuzz hfjson ...                          a Hugging Face tokenizer.json: tokenizer_init (the
//                                                 JSON reader and every refusal), then encode a fixed
//                                                 text and the input itself: ids < V, and without
//                                                 NFC and with added tokens that decode to their text,
//                                                 decode(encode(x)) == x
//   test/fuzz jsonl  ...                          prompt/completion JSONL: tokenize_prompts_to_shards
//                                                 (T 16) either refuses and leaves no file, or every
//                                                 shard + mask it wrote loads (dataloader_init, all
//                                                 batches, masks present)
//   test/fuzz chat   ...                          conversations JSONL (first byte: SmolLM2's or Llama
//                                                 3.1's chat template): tokenize_prompts_to_shards
//                                                 (T 128) refuses and leaves no file, or its shards
//                                                 load and every conversation counts its end of turn
//
//   test/fuzz mask   ...                          a loss mask beside a fixed shard: dataloader_init,
//                                                 every batch, the segment table
//   test/fuzz prompt ...                          -prompt @FILE / @FILE.jsonl (first byte): prompt_split,
//                                                 each prompt encoded
//   test/fuzz record ...                          a checkpoint's DONE / LATEST: marker_read, the run
//                                                 record taken as a resume takes it, the -tune line
//   test/fuzz rdv    ...                          the rendezvous's frames rank 0 reads from rank 1 in a
//                                                 host collective (a socket pair): rdv_allgather
//   test/fuzz chatcfg ...                         where conversations find the chat template: the input
//                                                 as chat_template.jinja or tokenizer_config.json
//                                                 (first byte), beside a fixed tokenizer.json: chat_init
//   test/fuzz peft   ...                          a PEFT adapter (2-byte config length, adapter_config.json,
//                                                 adapter_model.safetensors): lora_peft_open + fill
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
#include <dirent.h>
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
    static GPTConfig c = gpt2_config(1, 8, 2, 10, 16, 4);
    if (!ready) {
        ModelDesc d;
        BlockLayout lay;
        model_describe(&d, &c);
        model_layout(&d, &lay, 1, 0);
        memset(&comm, 0, sizeof(comm));
        comm.R = 1;
        zero_init(&z, &lay, 1, &comm, 0, OFFLOAD_NONE, OFFLOAD_NONE);
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
    Marker mk = {1, 0, 1, -1, 0, "", ""};
    if (size >= 8 * (STATE_H_NONCE + 1)) memcpy(&mk.nonce, data + 8 * STATE_H_NONCE, 8); // so the nonce check passes
    CkptMeta meta;
    OldState os;
    memset(&os, 0, sizeof(os));
    old_state_open(&os, &z, &c, dir, &mk, &meta);
    for (int a = 0; a < 3; a++) {
        os.which = a;
        zero_fill_opt(&z, a, old_state_fill, &os);
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

// GPT-2's tokenizer with its merges (bpe, jsonl), read once.
static Tokenizer* fuzz_gpt2_tokenizer(void) {
    static Tokenizer tok;
    static int ready = 0;
    char err[1024];
    if (!ready) {
        if (tokenizer_init(&tok, "data/gpt2_tokenizer.bin", err, sizeof(err)) || tokenizer_load_merges(&tok, "data/gpt2_merges.bin", err, sizeof(err))) {
            fprintf(stderr, "fuzz %s: %s (run from the repository root)\n", g_fuzz_harness, err);
            exit(1);
        }
        ready = 1;
    }
    return &tok;
}

// Encode text[0..n) with tok: ids < V, and the round trip where it must hold.
static void fuzz_hf_encode(Tokenizer* tok, const uint8_t* text, size_t n, int round_trip) {
    uint32_t* ids = NULL;
    size_t nids = 0, cap = 0;
    if (tokenizer_encode(tok, text, n, &ids, &nids, &cap) != 0) abort();
    size_t at = 0;
    for (size_t i = 0; i < nids; i++) {
        if (ids[i] >= tok->vocab_size) abort();
        int len;
        const char* s = tokenizer_decode(tok, ids[i], &len);
        if (round_trip && (at + (size_t)len > n || memcmp(s, text + at, (size_t)len))) abort();
        at += (size_t)len;
    }
    if (round_trip && at != n) abort();
    // streamed (tokenizer_hf_encode_part): encoding up to a safe cut before each of a few places
    // and then the rest gives the same ids
    for (size_t cut = n / 3; cut <= n; cut += n / 3 + 1) {
        uint32_t* parts = NULL;
        size_t nparts = 0, pcap = 0, consumed = 0, rest = 0;
        if (tokenizer_encode_part(tok, text, cut, 0, &consumed, &parts, &nparts, &pcap) != 0 || consumed > cut) abort();
        if (tokenizer_encode_part(tok, text + consumed, n - consumed, 1, &rest, &parts, &nparts, &pcap) != 0) abort();
        if (nparts != nids || (nids && memcmp(parts, ids, nids * sizeof(uint32_t)))) abort();
        free(parts);
    }
    free(ids);
}

static void fuzz_hfjson(const uint8_t* data, size_t size) {
    fuzz_write(data, size);
    Tokenizer tok;
    char err[1024];
    if (tokenizer_init(&tok, g_fuzz_path, err, sizeof(err)) != 0) return;
    if (!tok.hf) abort();  // it started with '{' or it would not be JSON at all
    int round_trip = !tok.hf->nnorms && !tok.hf->sp;  // (a normalizer, a Metaspace ▁ or a Prepend changes the text decoded)
    for (int k = 0; k < tok.hf->nadded; k++) {
        int len;
        const char* s = tokenizer_decode(&tok, tok.hf->added[k].id, &len);
        if ((uint32_t)len != tok.hf->added[k].len || memcmp(s, tok.hf->added[k].content, (size_t)len)) round_trip = 0;
    }
    static const char text[] = "Hello, WORLD'S 12345 \xc3\xa9" "e\xcc\x81 \xea\xb0\x80 <|endoftext|><|im_start|>  \r\n\n\t x\xff\xfe \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd";
    fuzz_hf_encode(&tok, (const uint8_t*)text, sizeof(text) - 1, round_trip);
    fuzz_hf_encode(&tok, data, size < 4096 ? size : 4096, round_trip);
    tok.hf->match_specials = 0;
    fuzz_hf_encode(&tok, (const uint8_t*)text, sizeof(text) - 1, round_trip);
    FILE* null = fopen("/dev/null", "w");
    for (uint32_t id = 0; id < tok.vocab_size + 2 && id < 100000; id++) tokenizer_print(&tok, id, null);
    fclose(null);
    tokenizer_free(&tok);
}

static void fuzz_bpe(const uint8_t* data, size_t size) {
    Tokenizer& tok = *fuzz_gpt2_tokenizer();
    uint32_t* whole = NULL;
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
    uint32_t* parts = NULL;
    size_t nparts = 0, pcap = 0;
    if (tokenizer_encode_part(&tok, data, split, 0, &consumed, &parts, &nparts, &pcap) != 0) abort();
    if (consumed > split) abort();
    size_t rest = 0;
    if (tokenizer_encode_part(&tok, data + consumed, size - consumed, 1, &rest, &parts, &nparts, &pcap) != 0) abort();
    if (nparts != nwhole || (nwhole && memcmp(parts, whole, nwhole * sizeof(uint32_t)))) abort();
    free(whole);
    free(parts);
}

// The scratch directory of a harness that writes several files (g_fuzz_path.d), emptied.
static const char* fuzz_scratch_dir(void) {
    static char dir[300];
    snprintf(dir, sizeof(dir), "%s.d", g_fuzz_path);
    mkdir(dir, 0755);
    DIR* dp = opendir(dir);
    if (!dp) abort();
    char path[600];
    for (struct dirent* e; (e = readdir(dp));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "config.json")) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            remove(path);
        }
    closedir(dp);
    return dir;
}

static int fuzz_count_files(const char* dir) {
    DIR* dp = opendir(dir);
    if (!dp) abort();
    int n = 0;
    for (struct dirent* e; (e = readdir(dp));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(dp);
    return n;
}

// A scratch Hugging Face checkpoint directory: config.json (config) and model.safetensors (the input).
static const char* fuzz_hf_dir(const char* config, size_t clen, const uint8_t* data, size_t size) {
    const char* dir = fuzz_scratch_dir();
    char path[400];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(config, 1, clen, f) != clen) abort();
    fclose(f);
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size)) abort();
    fclose(f);
    return dir;
}

// A Hugging Face checkpoint: the input is model.safetensors, beside a fixed small config.json (the
// seeds in dev/fuzz_seeds.py match it). Opened, it must bind to llm.c's layout (the config fixes
// both), and filling all parameters at once must equal filling them in pieces. The same bytes also
// go through the JSON parser directly (the header parser's input is usually the file's tail).
static void fuzz_safetensors(const uint8_t* data, size_t size) {
    static const char config[] = "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_embd\": 8, \"n_head\": 2, \"vocab_size\": 16, \"n_positions\": 8}\n";
    const char* dir = fuzz_hf_dir(config, sizeof(config) - 1, data, size);
    char err[2048];
    Json j;
    if (json_parse(&j, (const char*)data, size, err, sizeof(err)) == 0)
        for (int k = 0; k < j.n; k++) // every node's links and strings stay inside what was parsed
            if (j.nodes[k].first >= j.n || j.nodes[k].next >= j.n || (j.nodes[k].type == JSON_STRING && (j.nodes[k].len < 0 || (size_t)j.nodes[k].len > size))) abort();
    json_free(&j);
    HFCheckpoint ck;
    if (hf_open(&ck, dir, err, sizeof(err))) { hf_close(&ck); return; }
    GPTConfig c = gpt2_config(ck.cfg.L, ck.cfg.C, ck.cfg.NH, ck.cfg.V, (int)round_up(ck.cfg.V, 128), ck.cfg.maxT);
    ModelDesc d;
    model_describe(&d, &c);
    HFLlmcTensor lt[NUM_TENSORS];
    int nt = 0;
    for (int k = 0; k < NUM_TENSORS; k++)
        if (d.t[k].n) lt[nt++] = (HFLlmcTensor){d.t[k].name, d.t[k].logical, d.t[k].n, !d.t[k].io};
    if (hf_bind(&ck, lt, nt, c.Vp, err, sizeof(err))) { fprintf(stderr, "hf_bind: %s\n", err); abort(); }
    float* whole = (float*)malloc(sizeof(float) * (size_t)d.num_params);
    float* parts = (float*)malloc(sizeof(float) * (size_t)d.num_params);
    hf_fill(&ck, whole, 0, d.num_params);
    int64_t piece = 1 + (size ? data[size - 1] : 0) % 97;
    for (int64_t at = 0; at < d.num_params; at += piece)
        hf_fill(&ck, parts + at, at, piece < d.num_params - at ? piece : d.num_params - at);
    if (memcmp(whole, parts, sizeof(float) * (size_t)d.num_params)) abort(); // bitwise: NaNs included
    free(whole);
    free(parts);
    hf_close(&ck);
}

// [QLoRA] A bitsandbytes 4-bit checkpoint: the input is model.safetensors beside a fixed small Llama
// config.json whose quantization_config says bitsandbytes nf4 (the seed in dev/fuzz_seeds.py matches
// it). Opened, every 4-bit part of every layer is read into ops/nf4.cuh's storage (hf_nf4_part):
// refused or read, never outside the file or the part's bytes.
static void fuzz_bnb(const uint8_t* data, size_t size) {
    static const char config[] = "{\"model_type\": \"llama\", \"num_hidden_layers\": 1, \"hidden_size\": 8, \"num_attention_heads\": 2, "
        "\"num_key_value_heads\": 1, \"intermediate_size\": 16, \"vocab_size\": 16, \"max_position_embeddings\": 8, \"rms_norm_eps\": 1e-5, "
        "\"quantization_config\": {\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"nf4\", "
        "\"bnb_4bit_use_double_quant\": true, \"bnb_4bit_quant_storage\": \"uint8\", \"llm_int8_skip_modules\": [\"lm_head\"]}}\n";
    const char* dir = fuzz_hf_dir(config, sizeof(config) - 1, data, size);
    char err[2048];
    HFCheckpoint ck;
    if (hf_open(&ck, dir, err, sizeof(err))) { hf_close(&ck); return; }
    if (!ck.cfg.bnb4) abort();
    for (int k = 0; k < ck.nrows; k++) {
        const HFTensorRow* r = &ck.rows[k];
        if (!r->lin || !r->present) continue;
        int part = hf_row_part(&ck, k);
        int64_t n = r->d0 * r->d1;
        Nf4Part P = nf4_part(n);
        unsigned char* st = (unsigned char*)malloc((size_t)P.bytes);
        for (int l = 0; l < ck.cfg.L; l++) {
            int rc = hf_nf4_part(&ck, r->ours, l, part, st, n, err, sizeof(err));
            if (rc == 1) { float* out = (float*)malloc(sizeof(float) * (size_t)n); nf4_dequant_host_map(out, st, n, ck.dyn); free(out); }
            else if (rc != -1) abort(); // (a 4-bit checkpoint: read or refused)
        }
        free(st);
    }
    hf_close(&ck);
}

// The segment table of a loaded batch breaks its definition (seg[0] = 0, seg[t] = t or seg[t-1]).
static int fuzz_bad_segments(const DataLoader* dl) {
    for (int b = 0; b < dl->B; b++)
        for (int t = 0; t < dl->T; t++) {
            int s = dl->seg[b * dl->T + t];
            if (t == 0 ? s != 0 : s != t && s != dl->seg[b * dl->T + t - 1]) return 1;
        }
    return 0;
}

// Prompt/completion JSONL through -tokenize's packer (T 16, every 3rd example to val, shards of at
// most 40 tokens, so one input makes several): it either refuses the input and leaves no file, or
// every shard it wrote loads with its mask (example starts recorded), every batch of it.
static void fuzz_jsonl(const uint8_t* data, size_t size) {
    Tokenizer* tok = fuzz_gpt2_tokenizer();
    const char* dir = fuzz_scratch_dir();
    fuzz_write(data, size);
    const int T = 16;
    char prefix[400], pattern[500], err[2048];
    snprintf(prefix, sizeof(prefix), "%s/p", dir);
    PromptStats ps;
    if (tokenize_prompts_to_shards(tok, g_fuzz_path, prefix, T, 3, 40, "", &ps, err, sizeof(err))) {
        if (fuzz_count_files(dir)) { fprintf(stderr, "refused (%s) but left files behind\n", err); abort(); }
        return;
    }
    if (fuzz_count_files(dir) != 2 * (ps.shards[0] + ps.shards[1])) abort(); // a shard and a mask each
    static const char* splits[2] = {"train", "val"};
    for (int k = 0; k < 2; k++) {
        if (!ps.shards[k]) continue;
        snprintf(pattern, sizeof(pattern), "%s_%s_*.bin", prefix, splits[k]);
        DataLoader dl;
        if (dataloader_init(&dl, pattern, 1, T, 50257, 1, 7, err, sizeof(err))) { fprintf(stderr, "dataloader_init: %s\n", err); abort(); }
        if (!dl.has_mask || dl.nshards != ps.shards[k]) abort();
        if (!dl.has_starts || dataloader_segments(&dl, -1, err, sizeof(err))) abort(); // the masks record example starts
        for (int64_t u = 0; u < dl.total_samples + 1; u++)
            if (dataloader_load(&dl, u) != 0 || fuzz_bad_segments(&dl)) abort();
        dataloader_free(&dl);
    }
}

// A byte-level tokenizer.json written here (the 256 byte tokens, "ab", and the special tokens of
// ChatML and Llama 3) beside a tokenizer_config.json whose chat_template is the committed text of
// test/fixtures/chat/NAME.jinja: DIR, the directory, once per template.
static const char* fuzz_chat_tokenizer(const char* name) {
    static char dirs[2][400];
    int k = !strcmp(name, "smollm2") ? 0 : 1;
    if (dirs[k][0]) return dirs[k];
    snprintf(dirs[k], sizeof(dirs[k]), "%s.tok_%s", g_fuzz_path, name);
    mkdir(dirs[k], 0755);
    char path[600];
    snprintf(path, sizeof(path), "%s/tokenizer.json", dirs[k]);
    FILE* f = fopen(path, "wb");
    if (!f) abort();
    static const char* const specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    fprintf(f, "{\"added_tokens\": [");
    for (int i = 0; i < 7; i++)
        fprintf(f, "%s{\"id\": %d, \"content\": \"%s\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}",
                i ? ", " : "", 257 + i, specials[i]);
    fprintf(f, "], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}, "
               "\"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int b = 0; b < 256; b++) {
        unsigned char sp[4];
        int l = tokenizer_put_utf8(sp, tokenizer_byte_char(b));
        fprintf(f, "\"%s%.*s\": %d, ", sp[0] == '"' ? "\\\"" : sp[0] == '\\' ? "\\\\" : "", sp[0] == '"' || sp[0] == '\\' ? 0 : l, (const char*)sp, b);
    }
    fprintf(f, "\"ab\": 256}, \"merges\": [\"a b\"]}}");
    fclose(f);
    snprintf(path, sizeof(path), "test/fixtures/chat/%s.jinja", name);
    size_t n = 0;
    char err[512];
    char* t = tokenizer_read_file(path, &n, err, sizeof(err));
    if (!t) { fprintf(stderr, "fuzz chat: %s (run from the repository root)\n", err); exit(1); }
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dirs[k]);
    f = fopen(path, "wb");
    if (!f) abort();
    fprintf(f, "{\"bos_token\": \"<|begin_of_text|>\", \"chat_template\": \"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fprintf(f, "\"}");
    fclose(f);
    free(t);
    return dirs[k];
}

// Conversations (TRL's "messages" and prompt/completion message lists) through -tokenize's packer:
// the first byte picks the template (even: SmolLM2's ChatML; odd: Llama 3.1's, with trim and the
// date line), the rest is the JSONL. It either refuses and leaves no file, or every shard it wrote
// loads with its mask, and every conversation counts at least its last end-of-turn token.
static void fuzz_chat(const uint8_t* data, size_t size) {
    static Tokenizer toks[2];
    static int ready[2];
    int k = size ? data[0] & 1 : 0;
    char err[2048];
    if (!ready[k]) {
        if (tokenizer_init(&toks[k], fuzz_chat_tokenizer(k ? "llama3.1" : "smollm2"), err, sizeof(err))) { fprintf(stderr, "fuzz chat: %s\n", err); exit(1); }
        ready[k] = 1;
    }
    const char* dir = fuzz_scratch_dir();
    fuzz_write(size ? data + 1 : data, size ? size - 1 : 0);
    const int T = 128;
    char prefix[400], pattern[500];
    snprintf(prefix, sizeof(prefix), "%s/p", dir);
    PromptStats ps;
    if (tokenize_prompts_to_shards(&toks[k], g_fuzz_path, prefix, T, 3, 4 * T + 1, "2024-07-26", &ps, err, sizeof(err))) {
        if (fuzz_count_files(dir)) { fprintf(stderr, "refused (%s) but left files behind\n", err); abort(); }
        return;
    }
    if (fuzz_count_files(dir) != 2 * (ps.shards[0] + ps.shards[1])) abort();
    if (ps.chat_template[0] && ps.counted[0] + ps.counted[1] < ps.examples[0] + ps.examples[1]) abort();
    static const char* splits[2] = {"train", "val"};
    for (int s = 0; s < 2; s++) {
        if (!ps.shards[s]) continue;
        snprintf(pattern, sizeof(pattern), "%s_%s_*.bin", prefix, splits[s]);
        DataLoader dl;
        if (dataloader_init(&dl, pattern, 1, T, (int)toks[k].vocab_size, 1, 7, err, sizeof(err))) { fprintf(stderr, "dataloader_init: %s\n", err); abort(); }
        if (!dl.has_mask || dl.nshards != ps.shards[s]) abort();
        if (!dl.has_starts || dataloader_segments(&dl, -1, err, sizeof(err))) abort();
        for (int64_t u = 0; u < dl.total_samples + 1; u++)
            if (dataloader_load(&dl, u) != 0 || fuzz_bad_segments(&dl)) abort();
        dataloader_free(&dl);
    }
}

// A loss mask as the loader reads it (PATH.mask beside a fixed valid shard of 203 tokens): dataloader_init
// refuses it, or every batch loads with its targets masked and, when it records example starts,
// the segment table is whole (fuzz_bad_segments).
static void fuzz_mask(const uint8_t* data, size_t size) {
    const char* dir = fuzz_scratch_dir();
    char shard[400], mask[420], err[1024];
    snprintf(shard, sizeof(shard), "%s/s.bin", dir);
    snprintf(mask, sizeof(mask), "%s.mask", shard);
    uint16_t toks[203];
    for (int i = 0; i < 203; i++) toks[i] = (uint16_t)(i % 7 == 0 ? 50256 : 100 + i);
    if (write_token_shard(shard, toks, 203, err, sizeof(err))) { fprintf(stderr, "fuzz mask: %s\n", err); exit(1); }
    FILE* f = fopen(mask, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) abort();
    DataLoader dl;
    if (dataloader_init(&dl, shard, 2, 4, 50257, 1, 7, err, sizeof(err)) != 0) return;
    if (!dl.has_mask) abort(); // a mask beside the shard is read or refused, never ignored
    if (dl.has_starts && dataloader_segments(&dl, -1, err, sizeof(err))) abort();
    for (int64_t u = 0; u < dl.total_samples / 2 + 2; u++)
        if (dataloader_load(&dl, u) != 0 || (dl.seg && fuzz_bad_segments(&dl))) abort();
    dataloader_free(&dl);
}

// -prompt @FILE and @FILE.jsonl (bit 0 of the first byte picks): prompt_split refuses, or every
// prompt it lists has the length it says, and prompt_encode (bit 1: through SmolLM2's chat template;
// else GPT-2's BPE as text) refuses it naming it or gives ids inside the vocabulary, the document
// token first for a text that does not start with it.
static void fuzz_prompt(const uint8_t* data, size_t size) {
    int jsonl = size ? data[0] & 1 : 0;
    fuzz_write(size ? data + 1 : data, size ? size - 1 : 0);
    char* text;
    size_t len;
    char err[2048];
    if (prompt_file_read(g_fuzz_path, &text, &len, err, sizeof(err))) abort(); // (a regular file we wrote)
    PromptList pl;
    int rc = prompt_split("fuzz", text, len, jsonl, &pl, err, sizeof(err));
    free(text);
    if (rc) return;
    static Tokenizer chat_tok;
    static Chat chat;
    static int chat_ready;
    int templ = size ? (data[0] >> 1) & 1 : 0;
    if (templ && !chat_ready) {
        if (tokenizer_init(&chat_tok, fuzz_chat_tokenizer("smollm2"), err, sizeof(err)) || chat_init(&chat, &chat_tok, "", err, sizeof(err))) {
            fprintf(stderr, "fuzz prompt: %s\n", err);
            exit(1);
        }
        chat_ready = 1;
    }
    Tokenizer* tok = templ ? &chat_tok : fuzz_gpt2_tokenizer();
    int doc = tok->eot_token;
    uint32_t* ids = NULL;
    size_t nids = 0, cap = 0;
    for (int k = 0; k < pl.n; k++) {
        if (!pl.text[k] || strlen(pl.text[k]) > pl.len[k]) abort();
        int added;
        if (prompt_encode(templ ? &chat : NULL, tok, &pl, k, "fuzz", doc, doc, (int)tok->vocab_size, &ids, &nids, &cap, &added, err, sizeof(err))) {
            if (!strstr(err, "fuzz") && !strstr(err, "prompt ")) abort(); // (a refusal names the prompt)
            continue;
        }
        for (size_t i = 0; i < nids; i++) if (ids[i] >= tok->vocab_size) abort();
        if (!templ && (nids == 0 || (int)ids[0] != doc)) abort();
    }
    free(ids);
    prompt_list_free(&pl);
}

// A checkpoint's marker (DONE_%08d, LATEST): marker_read refuses it as incomplete, or its run record
// is what a resume takes flags from (flags_take_recorded over the defaults) and its -tune line is
// parsed (tune_record_values): every value found is a NUL-terminated string that fits.
static void fuzz_record(const uint8_t* data, size_t size) {
    fuzz_write(data, size);
    static Marker mk;
    if (marker_read(g_fuzz_path, &mk) != 0) return;
    if (strnlen(mk.run, sizeof(mk.run)) == sizeof(mk.run) || strnlen(mk.tune, sizeof(mk.tune)) == sizeof(mk.tune)) abort();
    static Flags f;
    char arg0[] = "train";
    char* argv[] = {arg0, NULL};
    flags_parse(&f, 1, argv);
    FILE* keep = stdout;
    stdout = fopen("/dev/null", "w"); // (flags_take_recorded says what it took)
    flags_take_recorded(&f, mk.run, mk.step);
    fclose(stdout);
    stdout = keep;
    char v[1024];
    static const char* keys[] = {"shards-i", "shards-j", "classifier-chunk", "lora-base", "-e", "-z"};
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
        if (ckpt_run_find(mk.run, keys[k], v, sizeof(v)) && strnlen(v, sizeof(v)) == sizeof(v)) abort();
    int tv[TUNE_NDIMS];
    (void)tune_record_values(mk.tune, tv);
}

// A PEFT adapter for -lora-init: the first two bytes are adapter_config.json's length, then its
// bytes, then adapter_model.safetensors; against a fixed run (GPT-2 L 1, C 8, NH 2, V 16, r 2,
// every target). lora_peft_open refuses it, or every adapter value it fills is finite.
static void fuzz_peft(const uint8_t* data, size_t size) {
    static int ready = 0;
    static GPTConfig c = gpt2_config(1, 8, 2, 16, 8, 16);
    static ModelDesc d;
    if (!ready) {
        lora_config(&c, 2, 0.0f, "all", 0.0f, "none");
        model_describe(&d, &c);
        static BlockLayout lay;
        model_layout(&d, &lay, 1, 0); // (the adapters' logical offsets)
        ready = 1;
    }
    const char* dir = fuzz_scratch_dir();
    size_t clen = size >= 2 ? (size_t)(data[0] | data[1] << 8) : 0;
    if (clen > size - (size >= 2 ? 2 : 0)) clen = size >= 2 ? size - 2 : 0;
    char path[420];
    snprintf(path, sizeof(path), "%s/adapter_config.json", dir);
    FILE* f = fopen(path, "wb");
    if (!f || (clen && fwrite(data + 2, 1, clen, f) != clen) || fclose(f) != 0) abort();
    snprintf(path, sizeof(path), "%s/adapter_model.safetensors", dir);
    size_t rest = size >= 2 ? size - 2 - clen : 0;
    f = fopen(path, "wb");
    if (!f || (rest && fwrite(data + 2 + clen, 1, rest, f) != rest) || fclose(f) != 0) abort();
    LoraPeft lp;
    memset(&lp, 0, sizeof(lp));
    lora_peft_open(&lp, dir, &d.lora, &c, "tiny");
    for (int k = 0; k < 2 * d.lora.nmods; k++) { // each module's A (every layer), then its B
        const LoraModule* m = &d.lora.mods[k / 2];
        int64_t n = (int64_t)c.L * (k % 2 ? m->rows * d.lora.r : d.lora.r * m->in);
        float* v = (float*)malloc(sizeof(float) * (size_t)n);
        lora_peft_fill(&lp, v, k % 2 ? m->logB : m->logA, n);
        for (int64_t i = 0; i < n; i++) if (!isfinite(v[i])) abort(); // (non-finite values are refused at open)
        free(v);
    }
    lora_peft_close(&lp);
}

// The rendezvous's frames (zero.h), as rank 0 reads them from rank 1 in a host collective (an
// 8-byte all-gather, #1, world of 2) over a socket pair: the input is everything rank 1 sends.
// rdv_allgather ends the rank (refused: garbage, a wrong frame, an ABORT with its code capped and
// its text escaped, a closed connection), or it returns with rank 1's 8 bytes in place.
static void fuzz_rdv(const uint8_t* data, size_t size) {
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) abort();
    int big = 1 << 20;
    setsockopt(sp[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    if (size && send(sp[1], data, size, MSG_NOSIGNAL) != (ssize_t)size) abort(); // (inputs are at most 16 KiB)
    shutdown(sp[1], SHUT_WR);
    fcntl(sp[0], F_SETFL, fcntl(sp[0], F_GETFL) | O_NONBLOCK);
    static Comm c;
    memset(&c, 0, sizeof(c));
    c.R = 2; c.r = 0; c.rdv = 1; c.timeout_s = 0.2;
    c.rdv_fd[0] = -1; c.rdv_fd[1] = sp[0];
    pthread_mutex_init(&c.rdv_mu, NULL);
    snprintf(c.rdv_where, sizeof(c.rdv_where), "127.0.0.1:29500");
    uint64_t mine = 0x1122334455667788ull, all[2] = {0, 0};
    FILE* keep = stdout;
    stdout = fopen("/dev/null", "w");
    int jumped = setjmp(g_fuzz_jmp); // (a refusal ends here: close the pair)
    if (!jumped) rdv_allgather(&c, &mine, all, 8, "fuzz");
    fclose(stdout);
    stdout = keep;
    close(sp[0]);
    close(sp[1]);
    pthread_mutex_destroy(&c.rdv_mu);
    if (jumped) return;
    if (all[0] != mine) abort();
    RdvHdr h;
    if (size < sizeof(h) + 8) abort(); // accepted: a whole DATA frame with its payload came first
    memcpy(&h, data, sizeof(h));
    if (h.kind != RDV_DATA || h.rank != 1 || h.seq != 1 || h.bytes != 8 || memcmp(&all[1], data + sizeof(h), 8)) abort();
}

// How conversations find the model's chat template (chat_init): beside a fixed tokenizer.json, the
// input after its first byte is chat_template.jinja (bit 0 set) or tokenizer_config.json (clear),
// and bit 1 adds a special_tokens_map.json naming the BOS. chat_init refuses (naming the file), or
// it knows the template and its end-of-turn token is one of the vocabulary's.
static void fuzz_chatcfg(const uint8_t* data, size_t size) {
    static Tokenizer tok;
    static int ready = 0;
    static char dir[400];
    char err[2048], path[600];
    if (!ready) {
        snprintf(dir, sizeof(dir), "%s", fuzz_chat_tokenizer("llama3.1"));
        if (tokenizer_init(&tok, dir, err, sizeof(err))) { fprintf(stderr, "fuzz chatcfg: %s\n", err); exit(1); }
        ready = 1;
    }
    int mode = size ? data[0] : 0;
    const uint8_t* body = size ? data + 1 : data;
    size_t n = size ? size - 1 : 0;
    snprintf(path, sizeof(path), "%s/chat_template.jinja", dir);
    unlink(path);
    if (!(mode & 1)) snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    FILE* f = fopen(path, "wb");
    if (!f || (n && fwrite(body, 1, n, f) != n) || fclose(f) != 0) abort();
    snprintf(path, sizeof(path), "%s/special_tokens_map.json", dir);
    unlink(path);
    if (mode & 2) {
        f = fopen(path, "wb");
        if (!f || fputs("{\"bos_token\": \"<|begin_of_text|>\"}", f) < 0 || fclose(f) != 0) abort();
    }
    Chat c;
    if (chat_init(&c, &tok, "", err, sizeof(err))) return;
    if (!c.t || c.end_of_turn < 0 || (uint32_t)c.end_of_turn >= tok.vocab_size) abort();
}

// The harnesses, by name: this table drives the dispatch and the usage line.
static const struct { const char* name; void (*fn)(const uint8_t*, size_t); } g_fuzz_harnesses[] = {
    {"model", fuzz_model}, {"shard", fuzz_shard}, {"state", fuzz_state}, {"tokenizer", fuzz_tokenizer},
    {"bpe", fuzz_bpe}, {"safetensors", fuzz_safetensors}, {"jsonl", fuzz_jsonl}, {"hfjson", fuzz_hfjson}, {"chat", fuzz_chat},
    {"mask", fuzz_mask}, {"prompt", fuzz_prompt}, {"record", fuzz_record}, {"peft", fuzz_peft}, {"rdv", fuzz_rdv}, {"chatcfg", fuzz_chatcfg},
    {"bnb", fuzz_bnb},
};
static void (*g_fuzz_fn)(const uint8_t*, size_t) = NULL;

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
    g_fuzz_harness = getenv("ZT_FUZZ_HARNESS");
    if (!g_fuzz_harness && *argc > 1 && (*argv)[1][0] != '-') { // the harness name, then libFuzzer's arguments
        g_fuzz_harness = (*argv)[1];
        for (int i = 1; i < *argc - 1; i++) (*argv)[i] = (*argv)[i + 1];
        (*argc)--;
    }
    for (size_t k = 0; g_fuzz_harness && k < sizeof(g_fuzz_harnesses) / sizeof(g_fuzz_harnesses[0]); k++)
        if (!strcmp(g_fuzz_harness, g_fuzz_harnesses[k].name)) g_fuzz_fn = g_fuzz_harnesses[k].fn;
    if (!g_fuzz_fn) {
        fprintf(stderr, "usage: test/fuzz ");
        for (size_t k = 0; k < sizeof(g_fuzz_harnesses) / sizeof(g_fuzz_harnesses[0]); k++) fprintf(stderr, "%s%s", k ? "|" : "", g_fuzz_harnesses[k].name);
        fprintf(stderr, " [libFuzzer flags] [corpus dirs]\n");
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
        g_fuzz_fn(data, size);
    } else {
        fuzz_close_new_fds(); // refused (die): what it left open
    }
    return 0;
}
