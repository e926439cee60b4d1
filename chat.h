// chat.h — conversations as fine-tuning data: TRL's conversational format rendered with the
// model's chat template, in C, byte for byte as transformers' apply_chat_template renders it, then
// tokenised with the model's tokenizer.json and masked so that only the assistant's turns count.
// prompts.h calls it for the .jsonl lines of -tokenize that hold message lists; the user's view is
// docs/chat.md.
//
// A C program does not run Jinja. The templates that matter are recognised by the SHA-256 of the
// template (chat_template.jinja, else tokenizer_config.json's "chat_template": chat_init; CHAT_TEMPLATES below; each text is committed in
// test/fixtures/chat/ with its source) and rendered by hand-written C that follows the template
// line by line (chat_render). Any other template is refused, naming the file and its hash: a
// rendering that differs by one newline from what the model was trained on silently degrades a
// fine-tune, so there is no "close enough" fallback.
//
// What is rendered: messages whose role is "system", "user" or "assistant" and whose content is a
// string, no tools; add_generation_prompt false (the training case: chat_encode) or true (-prompt:
// chat_encode_prompt, the rendering then ends with the assistant's header — ChatML
// "<|im_start|>assistant\n", Llama 3 "<|start_header_id|>assistant<|end_header_id|>\n\n"). Per family:
//   ChatML (Qwen2.5, SmolLM2): when messages[0] is not a system message the template's default
//     system prompt comes first; then each message as
//       <|im_start|>ROLE\nCONTENT<|im_end|>\n
//   Llama 3 (Meta-Llama-3-*-Instruct): BOS, then each message as
//       <|start_header_id|>ROLE<|end_header_id|>\n\nTRIM(CONTENT)<|eot_id|>
//   Llama 3.1 / 3.2: BOS, a system block that is always there,
//       <|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n
//       Today Date: DATE\n\nTRIM(SYSTEM CONTENT or "")<|eot_id|>
//     then every other message as Llama 3 does. DATE is "%d %b %Y" ("26 Jul 2024"): -chat-date
//     YYYY-MM-DD when given (transformers' date_string); else 3.1's template default "26 Jul 2024",
//     3.2's strftime_now, i.e. today — taken once, in UTC, by the one process that runs -tokenize.
//   TRIM is Jinja's trim filter: Python's str.strip(), the whitespace of str.isspace (chat_trim).
//   Qwen3 (two revisions, the same bytes for string contents): ChatML without a default system
//     prompt; an assistant message's <think>...</think> reasoning kept, in a
//     <think>\nR\n</think>\n\n block, only after the last user query (chat_render_qwen3 says how).
//   Mistral (Mistral-7B-Instruct v0.1/v0.2, v0.3's first revision): BOS, user and assistant
//     alternating from a user message (no system message), as
//       [INST] USER [/INST]ASSISTANT</s>
//   Mistral v0.3 (its template with tools): an optional system message first, the rest alternating
//     from a user message, BOS, then
//       [INST] USER[/INST] TRIM(ASSISTANT)</s>
//     the system message written only into the last user message, "[INST] SYSTEM\n\nUSER[/INST]",
//     when that message is the conversation's last (a prompt; in a training conversation, which
//     ends with the assistant, the template drops it: we render what the template renders).
//   Mixtral (Mixtral-8x7B-Instruct-v0.1): an optional system message first, the rest alternating
//     from a user message, BOS, then " [INST] USER [/INST]" + " " + ASSISTANT + "</s>", the system
//     message in the first user message's, " [INST] SYSTEM\n\nUSER [/INST]".
//   Llama 2 (Llama-2-*-chat-hf): an optional system message first, the rest alternating from a user
//     message, each user message BOS + "[INST] " + STRIP(CONTENT) + " [/INST]" (the system message
//     in the first one's: "<<SYS>>\nSYSTEM\n<</SYS>>\n\n" + CONTENT, stripped together), each answer
//     " " + STRIP(ANSWER) + " " + "</s>" (the space before </s> counts with the answer); a later
//     system message at an odd place is written nowhere.
//   Phi-3 (Phi-3-mini-4k-instruct): each message as <|ROLE|>\nCONTENT<|end|>\n, then the
//     generation prompt <|assistant|>\n, or without it eos_token (<|endoftext|>).
//   A conversation a template refuses (Mistral's raise_exception: roles that do not alternate, a
//     system message where it has none) is refused with the template's own words.
//
// Which tokens count (the loss mask, chat_encode): the rendered text is encoded whole, as
// apply_chat_template(tokenize=True) does (special tokens matched), and a token counts when its
// bytes overlap the content of a counted assistant message (as rendered: trimmed for Llama 3; Qwen3:
// all it writes after its header), or
// when it is the end-of-turn token written right after that content (<|im_end|> for ChatML,
// <|eot_id|> for Llama 3, </s> for Mistral, <|end|> for Phi-3). Nothing else counts: not the role
// headers, not the "\n" after <|im_end|>, not system or user text, not the BOS, not Phi-3's
// closing <|endoftext|>. A token that holds template text and the first bytes of an answer
// together (ChatML, an answer starting with whitespace the pre-tokenizer joins to the header's
// "\n"; Phi-3, whitespace its rstrip header tokens take) counts. Token spans come from the decoded
// bytes of the ids, checked to spell the rendering (its NFC, for Qwen2's normalizer) exactly, up
// to what a SentencePiece-style tokenizer changes: the "▁" it prepends to a piece of text (a
// space no byte of the rendering holds) and the whitespace an added token with lstrip or rstrip
// takes (chat_align).
//
// defines: Chat, ChatMsg, ChatText, CHAT_TEMPLATES, CHAT_ROLE, chat_sha256_hex, chat_date_string,
//          chat_init, chat_trim, chat_render, chat_encode, chat_encode_prompt
//
// May call: safetensors.h (the JSON parser), tokenizer.h (encode, decode lengths, NFC) and libc.
#ifndef ZT_CHAT_H
#define ZT_CHAT_H

#include <time.h>
#include "safetensors.h" // defines: Json, json_parse, json_get, st_err
#include "tokenizer.h"   // defines: Tokenizer, tokenizer_encode, tokenizer_nfc, tokenizer_read_file

// -----------------------------------------------------------------------------------------------
// SHA-256 (FIPS 180-4), for recognising a template by its text.

static const uint32_t CHAT_SHA_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be,
    0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa,
    0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
    0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
    0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
    0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static inline uint32_t chat_rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void chat_sha256_block(uint32_t h[8], const unsigned char* p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = chat_rotr(w[i - 15], 7) ^ chat_rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = chat_rotr(w[i - 2], 17) ^ chat_rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (chat_rotr(e, 6) ^ chat_rotr(e, 11) ^ chat_rotr(e, 25)) + ((e & f) ^ (~e & g)) + CHAT_SHA_K[i] + w[i];
        uint32_t t2 = (chat_rotr(a, 2) ^ chat_rotr(a, 13) ^ chat_rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

// The SHA-256 of p[0, n) as 64 lower-case hex digits (and a NUL) in hex.
static void chat_sha256_hex(const void* data, size_t n, char hex[65]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const unsigned char* p = (const unsigned char*)data;
    size_t at = 0;
    for (; at + 64 <= n; at += 64) chat_sha256_block(h, p + at);
    unsigned char last[128] = {0};
    size_t rest = n - at, len = rest + 9 <= 64 ? 64 : 128;
    memcpy(last, p + at, rest);
    last[rest] = 0x80;
    uint64_t bits = (uint64_t)n * 8;
    for (int i = 0; i < 8; i++) last[len - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (size_t b = 0; b < len; b += 64) chat_sha256_block(h, last + b);
    for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", h[i]);
}

// -----------------------------------------------------------------------------------------------
// The templates this build renders: one row each (the hash is of the chat_template string as
// tokenizer_config.json holds it, JSON-decoded, UTF-8). Texts and sources: test/fixtures/chat/.

typedef enum { CHAT_CHATML, CHAT_LLAMA3, CHAT_LLAMA31, CHAT_QWEN3, CHAT_MISTRAL, CHAT_MISTRAL3, CHAT_MIXTRAL, CHAT_LLAMA2, CHAT_PHI3 } ChatFamily;
static inline int chat_is_inst(ChatFamily f) { return f == CHAT_MISTRAL || f == CHAT_MISTRAL3 || f == CHAT_MIXTRAL || f == CHAT_LLAMA2; } // [INST] turns
static inline int chat_writes_bos(ChatFamily f) { return f == CHAT_LLAMA3 || f == CHAT_LLAMA31 || chat_is_inst(f); }
static inline int chat_writes_eos(ChatFamily f) { return chat_is_inst(f) || f == CHAT_PHI3; }
typedef struct {
    const char* name;            // the fixture's name: test/fixtures/chat/NAME.jinja
    const char* sha256;
    const char* models;          // whose tokenizer_config.json ships it (for messages and docs)
    ChatFamily family;
    const char* default_system;  // ChatML: the system prompt rendered when messages[0] is not one
    const char* end_of_turn;     // the token the template writes right after every message
    const char* default_date;    // Llama 3.1/3.2: the date when -chat-date is not given ("": today)
} ChatTemplateInfo;

static const ChatTemplateInfo CHAT_TEMPLATES[] = {
    {"qwen2.5", "cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f", "Qwen2.5-*-Instruct", CHAT_CHATML,
     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", "<|im_end|>", NULL},
    {"smollm2", "872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788", "SmolLM2-*-Instruct", CHAT_CHATML,
     "You are a helpful AI assistant named SmolLM, trained by Hugging Face", "<|im_end|>", NULL},
    {"llama3", "ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122", "Meta-Llama-3-8B/70B-Instruct", CHAT_LLAMA3, NULL,
     "<|eot_id|>", NULL},
    {"llama3.1", "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65", "Llama-3.1-8B/70B/405B-Instruct", CHAT_LLAMA31, NULL,
     "<|eot_id|>", "26 Jul 2024"},
    {"llama3.2", "5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4", "Llama-3.2-1B/3B-Instruct", CHAT_LLAMA31, NULL,
     "<|eot_id|>", ""},
    // Qwen3's two revisions: they render string contents alike (they differ for list contents and a
    // reasoning_content that is not a string, which -tokenize never passes)
    {"qwen3", "a55ee1b1660128b7098723e0abcd92caa0788061051c62d51cbe87d9cf1974d8", "Qwen3-0.6B ... 32B (Qwen/Qwen3-*)", CHAT_QWEN3, NULL,
     "<|im_end|>", NULL},
    {"qwen3-first", "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5", "Qwen3 (its first revision: Qwen3-Embedding, mlx-community copies)",
     CHAT_QWEN3, NULL, "<|im_end|>", NULL},
    // Mistral's first template (v0.1, v0.2; v0.3's first revision, as its GGUF copies keep it) and
    // v0.3's with tools, which Mistral-Small-2409 and Mistral-Large-2407 ship too
    {"mistral", "26a59556925c987317ce5291811ba3b7f32ec4c647c400c6cc7e3a9993007ba7", "Mistral-7B-Instruct-v0.1/v0.2 (v0.3's first revision)",
     CHAT_MISTRAL, NULL, "</s>", NULL},
    {"mistral-v0.3", "e16746b40344d6c5b5265988e0328a0bf7277be86f1c335156eae07e29c82826", "Mistral-7B-Instruct-v0.3, Mistral-Small-2409",
     CHAT_MISTRAL3, NULL, "</s>", NULL},
    {"mixtral", "796853172235ab3aaa4810013ddfe2eab481bda3306dad4f700c00d436eed596", "Mixtral-8x7B-Instruct-v0.1", CHAT_MIXTRAL, NULL, "</s>", NULL},
    {"llama2", "e8d5b5a546d3f19df16a5320c614fab05bdc4edd50e850f1afd947b503ea41cf", "Llama-2-7b/13b/70b-chat-hf", CHAT_LLAMA2, NULL, "</s>", NULL},
    {"phi-3", "dcaee66df77bfbb789ec541fe713218da30225a526f1db97138fc39ee6dc56aa", "Phi-3-mini-4k-instruct", CHAT_PHI3, NULL, "<|end|>", NULL},
};
#define CHAT_NTEMPLATES ((int)(sizeof(CHAT_TEMPLATES) / sizeof(CHAT_TEMPLATES[0])))

enum { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT };
static const char* const CHAT_ROLE[] = {"system", "user", "assistant"};

typedef struct {
    int role;             // CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT
    const char* content;  // its bytes (UTF-8, from the JSON parser; may hold NUL: see len)
    size_t len;
    int counted;          // an assistant message whose tokens count
} ChatMsg;

typedef struct {
    const ChatTemplateInfo* t;
    char path[4200];        // tokenizer_config.json, for messages
    char bos[256];          // Llama, Mistral: tokenizer_config.json's bos_token (the template writes it first)
    char eos[256];          // Mistral, Phi-3: its eos_token (written after each answer / at the end)
    char date[32];          // Llama 3.1/3.2: the date line's date
    uint32_t end_of_turn;   // the id of t->end_of_turn
} Chat;

typedef struct { char* s; size_t n, cap; } ChatText;  // a growable byte string

static int chat_put(ChatText* t, const char* s, size_t n) {
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 1024;
        while (cap < t->n + n + 1) cap *= 2;
        char* ns = (char*)realloc(t->s, cap);
        if (!ns) return -1;
        t->s = ns;
        t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = 0;
    return 0;
}
static int chat_puts(ChatText* t, const char* s) { return chat_put(t, s, strlen(s)); }

// -chat-date YYYY-MM-DD as "%d %b %Y" in the C locale ("2024-07-26" -> "26 Jul 2024"); "" is today
// in UTC. 0, or -1 with err (a date that does not exist, or another form).
static int chat_date_string(const char* iso, char out[32], char* err, size_t errlen) {
    static const char* const mon[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    int y, m, d;
    if (!iso || !*iso) {
        time_t now = time(NULL);
        struct tm tm;
        if (now == (time_t)-1 || !gmtime_r(&now, &tm)) return st_err(err, errlen, "-chat-date: the clock cannot be read: give -chat-date YYYY-MM-DD");
        y = tm.tm_year + 1900, m = tm.tm_mon + 1, d = tm.tm_mday;
    } else {
        char tail;
        if (strlen(iso) != 10 || iso[4] != '-' || iso[7] != '-' || sscanf(iso, "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3)
            return st_err(err, errlen, "-chat-date %s: not a date YYYY-MM-DD", iso);
        static const int days[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        if (y < 1 || m < 1 || m > 12 || d < 1 || d > days[m - 1] || (m == 2 && d == 29 && !leap))
            return st_err(err, errlen, "-chat-date %s: no such date", iso);
    }
    snprintf(out, 32, "%02d %s %04d", d, mon[m - 1], y);
    return 0;
}

// Read the JSON file at path into *j: 1, 0 when there is no such file, -1 with err.
static int chat_read_json(const char* path, Json* j, char* err, size_t errlen) {
    struct stat sb;
    memset(j, 0, sizeof(*j));
    if (stat(path, &sb) != 0) return 0;
    size_t len;
    char ferr[512], jerr[256];
    char* text = tokenizer_read_file(path, &len, ferr, sizeof(ferr));
    if (!text) return st_err(err, errlen, "%s", ferr);
    int rc = json_parse(j, text, len, jerr, sizeof(jerr));
    free(text);
    if (rc || j->nodes[0].type != JSON_OBJECT) { json_free(j); memset(j, 0, sizeof(*j)); return st_err(err, errlen, "%s: %s", path, rc ? jerr : "not a JSON object"); }
    return 1;
}

// A special token of a config (a string, or an object with "content") into out; 0 if absent.
static int chat_config_token(const Json* j, const char* key, char* out, size_t cap) {
    int b = json_get(j, 0, key);
    if (b >= 0 && j->nodes[b].type == JSON_OBJECT) b = json_get(j, b, "content");
    if (b < 0 || j->nodes[b].type != JSON_STRING || j->nodes[b].len == 0 || j->nodes[b].len >= (int64_t)cap) return 0;
    memcpy(out, j->nodes[b].str, (size_t)j->nodes[b].len + 1);
    return 1;
}

// Find the model's chat template beside tok's tokenizer.json — chat_template.jinja when there is one
// (recent transformers, 4.5x, save the template there and read it first), else tokenizer_config.json's
// "chat_template" (a list of named templates: the one named "default", as transformers takes it) —
// recognise it, and find what rendering needs (Llama: bos_token, from tokenizer_config.json or
// special_tokens_map.json). chat_date: -chat-date ("" for the template's own default). 0, or with err
// naming the file: CHAT_NONE (no template: llm.c's tokenizer, a base model), CHAT_UNKNOWN (a template
// this build does not render: its hash and the known ones), -1 (anything else: a file that cannot be
// read, a bad -chat-date, a token the template needs missing).
enum { CHAT_NONE = -2, CHAT_UNKNOWN = -3 };
static int chat_init(Chat* c, const Tokenizer* tok, const char* chat_date, char* err, size_t errlen) {
    memset(c, 0, sizeof(*c));
    if (!tok->hf) {
        st_err(err, errlen, "conversations need the model's chat template: -tokenizer is llm.c's GPT-2 file. HINT: -tokenizer DIR "
                            "(the model's directory, with tokenizer.json and tokenizer_config.json)");
        return CHAT_NONE;
    }
    const char* cfg = tok->hf->src_config;
    const char* slash = strrchr(cfg, '/');
    int dirlen = slash ? (int)(slash - cfg + 1) : 0;
    char jinja[4200], stmap[4200];
    snprintf(jinja, sizeof(jinja), "%.*schat_template.jinja", dirlen, cfg);
    snprintf(stmap, sizeof(stmap), "%.*sspecial_tokens_map.json", dirlen, cfg);
    Json j;
    int have = chat_read_json(cfg, &j, err, errlen);
    if (have < 0) return -1;
    char* text = NULL;  // the template's bytes
    size_t tlen = 0;
    struct stat sb;
    if (stat(jinja, &sb) == 0) {
        char ferr[512];
        if (!(text = tokenizer_read_file(jinja, &tlen, ferr, sizeof(ferr)))) { if (have) json_free(&j); return st_err(err, errlen, "%s", ferr); }
        snprintf(c->path, sizeof(c->path), "%s", jinja);
    } else {
        int ct = have ? json_get(&j, 0, "chat_template") : -1;
        if (ct >= 0 && j.nodes[ct].type == JSON_ARRAY) {  // named templates: transformers takes "default"
            int pick = -1;
            for (int e = j.nodes[ct].first; e >= 0; e = j.nodes[e].next) {
                int nm = json_get(&j, e, "name");
                if (nm >= 0 && j.nodes[nm].type == JSON_STRING && !strcmp(j.nodes[nm].str, "default")) pick = json_get(&j, e, "template");
            }
            ct = pick;
        }
        if (ct < 0 || j.nodes[ct].type != JSON_STRING) {
            if (have) json_free(&j);
            st_err(err, errlen, "conversations need the model's chat template: %s %s, and there is no %s (a base model without a chat "
                   "template cannot render conversations)", cfg, have ? "has no chat_template string" : "does not exist", jinja);
            return CHAT_NONE;
        }
        tlen = (size_t)j.nodes[ct].len;
        text = (char*)malloc(tlen + 1);
        if (!text) { json_free(&j); return st_err(err, errlen, "out of memory"); }
        memcpy(text, j.nodes[ct].str, tlen + 1);
        snprintf(c->path, sizeof(c->path), "%s", cfg);
    }
    char hex[65];
    chat_sha256_hex(text, tlen, hex);
    free(text);
    for (int i = 0; i < CHAT_NTEMPLATES && !c->t; i++)
        if (!strcmp(hex, CHAT_TEMPLATES[i].sha256)) c->t = &CHAT_TEMPLATES[i];
    if (!c->t) {
        char known[1536] = "";
        for (int i = 0; i < CHAT_NTEMPLATES; i++)
            snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s (%s)", i ? ", " : "", CHAT_TEMPLATES[i].name, CHAT_TEMPLATES[i].models);
        if (have) json_free(&j);
        st_err(err, errlen, "%s: the chat template with SHA-256 %s is not one this build renders exactly (known: %s); "
                            "docs/chat.md says how to add one", c->path, hex, known);
        return CHAT_UNKNOWN;
    }
    for (int k = 0; k < 2; k++) {  // bos_token, eos_token: when the template writes it
        const char* key = k ? "eos_token" : "bos_token", *when = k ? "" : " first";
        char* dst = k ? c->eos : c->bos;
        if (!(k ? chat_writes_eos(c->t->family) : chat_writes_bos(c->t->family))) continue;
        int found = have && chat_config_token(&j, key, dst, 256);
        Json m;
        int hm = found ? 0 : chat_read_json(stmap, &m, err, errlen);
        if (hm < 0) { if (have) json_free(&j); return -1; }
        if (hm) {
            found = chat_config_token(&m, key, dst, 256);
            json_free(&m);
        }
        if (!found) {
            if (have) json_free(&j);
            return st_err(err, errlen, "%s: the %s template writes %s%s, and neither %s nor %s names one", c->path, c->t->name, key, when, cfg, stmap);
        }
    }
    if (have) json_free(&j);
    if (c->t->default_date) {  // -chat-date is transformers' date_string; else the template's default
        if (chat_date && *chat_date) { if (chat_date_string(chat_date, c->date, err, errlen) != 0) return -1; }
        else if (c->t->default_date[0]) snprintf(c->date, sizeof(c->date), "%s", c->t->default_date);
        else if (chat_date_string("", c->date, err, errlen) != 0) return -1;
    }
    const TokenizerHF* h = tok->hf;
    int found = 0;
    for (int a = 0; a < h->nadded && !found; a++)
        if (!strcmp(h->added[a].content, c->t->end_of_turn)) c->end_of_turn = h->added[a].id, found = 1;
    if (!found) return st_err(err, errlen, "tokenizer %s: no added token %s, which the %s template ends every turn with", h->src_json, c->t->end_of_turn, c->t->name);
    return 0;
}

// Python's str.isspace for one code point: Jinja's trim is str.strip().
static int chat_isspace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Jinja's trim on s[0, n) (valid UTF-8): the offsets [*a, *b) of what is left.
static void chat_trim(const char* s, size_t n, size_t* a, size_t* b) {
    const unsigned char* u = (const unsigned char*)s;
    size_t i = 0, j = n;
    uint32_t cp;
    while (i < j) {
        int l = tokenizer_utf8(u + i, j - i, &cp);
        if (l <= 0 || !chat_isspace(cp)) break;
        i += (size_t)l;
    }
    while (j > i) {
        size_t k = j - 1;
        while (k > i && (u[k] & 0xC0) == 0x80) k--; // the start of the last character
        int l = tokenizer_utf8(u + k, j - k, &cp);
        if (l <= 0 || (size_t)l != j - k || !chat_isspace(cp)) break;
        j = k;
    }
    *a = i;
    *b = j;
}

// Append message m's content as the template writes it (trim: Jinja's trim, as Llama 3 writes every
// content and Mistral v0.3 an answer), its span in *span.
static int chat_put_content(ChatText* t, const ChatMsg* m, int trim, size_t span[2]) {
    size_t a = 0, b = m->len;
    if (trim) chat_trim(m->content, m->len, &a, &b);
    span[0] = t->n;
    int rc = chat_put(t, m->content + a, b - a);
    span[1] = t->n;
    return rc;
}

// s[0, n) holds w (length wn) at *at: its first (last: 1) occurrence.
static int chat_find(const char* s, size_t n, const char* w, int last, size_t* at) {
    size_t wn = strlen(w);
    int found = 0;
    for (size_t i = 0; i + wn <= n; i++)
        if (!memcmp(s + i, w, wn)) { *at = i; found = 1; if (!last) break; }
    return found;
}

// Qwen3's assistant message (the template's lines, for a string content): a reasoning part and a
// content part, as offsets into m's content. With '</think>' in it: content = what follows the last
// '</think>', lstrip('\n'); reasoning = what precedes the first '</think>', rstrip('\n'), after its
// last '<think>', lstrip('\n'). Without: the whole content, no reasoning.
static void chat_qwen3_split(const ChatMsg* m, size_t r[2], size_t t[2]) {
    const char* s = m->content;
    size_t n = m->len, k;
    r[0] = r[1] = 0;
    t[0] = 0; t[1] = n;
    if (!chat_find(s, n, "</think>", 1, &k)) return;
    t[0] = k + 8;
    while (t[0] < n && s[t[0]] == '\n') t[0]++;
    chat_find(s, n, "</think>", 0, &k);
    size_t b = k, a = 0;
    while (b > 0 && s[b - 1] == '\n') b--;
    if (chat_find(s, b, "<think>", 1, &k)) a = k + 7;
    while (a < b && s[a] == '\n') a++;
    r[0] = a; r[1] = b;
}

// Qwen3's template (the rows "qwen3", "qwen3-first"), for string contents and no tools: a system
// message first is its own block (no default system prompt); user and later system messages as
// ChatML; an assistant message after the last user query (the last user message not wrapped in
// <tool_response>...</tool_response>) that is the last message or has reasoning is written
//     <|im_start|>assistant\n<think>\nREASONING.strip('\n')\n</think>\n\nCONTENT.lstrip('\n')<|im_end|>\n
// (so a final answer without reasoning gets an empty <think>\n\n</think>\n\n block), every other
// assistant message <|im_start|>assistant\nCONTENT<|im_end|>\n, its reasoning dropped. An assistant
// message's span (what counts) is all it writes after its header: the think block too, which the
// model writes itself after the generation prompt <|im_start|>assistant\n.
static int chat_render_qwen3(const ChatMsg* m, int n, int gen, ChatText* out, size_t (*spans)[2]) {
    int rc = 0, last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        size_t len = m[i].len;
        if (m[i].role != CHAT_USER) continue;  // content.startswith('<tool_response>') and content.endswith('</tool_response>')
        int wrapped = len >= 15 && !memcmp(m[i].content, "<tool_response>", 15) && len >= 16 && !memcmp(m[i].content + len - 16, "</tool_response>", 16);
        if (!wrapped) { last_query = i; break; }
    }
    for (int i = 0; i < n; i++) {
        rc |= chat_puts(out, "<|im_start|>") | chat_puts(out, CHAT_ROLE[m[i].role]) | chat_puts(out, "\n");
        spans[i][0] = out->n;
        if (m[i].role != CHAT_ASSISTANT) rc |= chat_put(out, m[i].content, m[i].len);
        else {
            size_t r[2], t[2];
            chat_qwen3_split(&m[i], r, t);
            const char* s = m[i].content;
            if (i > last_query && (i == n - 1 || r[1] > r[0])) {
                while (r[0] < r[1] && s[r[0]] == '\n') r[0]++; // reasoning.strip('\n') (its end is stripped already
                while (r[1] > r[0] && s[r[1] - 1] == '\n') r[1]--; //  when it came from a split; not when there was none)
                while (t[0] < t[1] && s[t[0]] == '\n') t[0]++; // content.lstrip('\n')
                rc |= chat_puts(out, "<think>\n") | chat_put(out, s + r[0], r[1] - r[0]) | chat_puts(out, "\n</think>\n\n") | chat_put(out, s + t[0], t[1] - t[0]);
            } else rc |= chat_put(out, s + t[0], t[1] - t[0]);
        }
        spans[i][1] = out->n;
        rc |= chat_puts(out, "<|im_end|>\n");
    }
    if (gen) rc |= chat_puts(out, "<|im_start|>assistant\n");  // (enable_thinking is never passed: the template's default)
    return rc ? -1 : 0;
}

// The [INST] templates: Mistral's (the rows "mistral", "mistral-v0.3", "mixtral") and Llama 2's
// ("llama2"), for string contents and no tools. Each checks that the roles alternate user,
// assistant, user, ... (all but "mistral" after an optional system message) and raise_exception
// otherwise, with the words quoted here: message by message (the alternation, then the role),
// v0.3 the alternation of all first. Then
//   mistral:      BOS, each user message "[INST] " + content + " [/INST]", each answer content + EOS
//   mistral-v0.3: BOS, each user message "[INST] " + content + "[/INST]" — the system message,
//                 when there is one, goes into the last message's, "[INST] " + system + "\n\n" +
//                 content + "[/INST]", only when that is a user message (loop.last) — and each
//                 answer " " + trim(content) + EOS.
//   mixtral:      BOS, each user message " [INST] " + content + " [/INST]" (the system message into
//                 the first one's, " [INST] " + system + "\n\n" + content + " [/INST]"), each answer
//                 " " + content + EOS.
//   llama2:       (message by message, alternation only: a later system message at an odd place is
//                 written nowhere) each user message BOS + "[INST] " + strip(content) + " [/INST]",
//                 the first one's content "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content (one
//                 strip of the whole), each answer " " + strip(content) + " " + EOS, its span taking
//                 the space before EOS (so that EOS is the end of turn right after it).
// add_generation_prompt writes nothing in any. 0, or -1 with err.
static int chat_render_inst(const Chat* c, const ChatMsg* m, int n, ChatText* out, size_t (*spans)[2], char* err, size_t errlen) {
    ChatFamily f = c->t->family;
    int v3 = f == CHAT_MISTRAL3, mx = f == CHAT_MIXTRAL, l2 = f == CHAT_LLAMA2, sys = f != CHAT_MISTRAL && n > 0 && m[0].role == CHAT_SYSTEM, rc = 0;
    for (int pass = v3 ? 0 : 1; pass < 2; pass++)  // v0.3: the alternation of every message first
        for (int i = sys; i < n; i++) {
            if ((m[i].role == CHAT_USER) != ((i - sys) % 2 == 0))  // (message['role'] == 'user') != (index % 2 == 0)
                return st_err(err, errlen, "the %s chat template refuses the conversation (message %d is the %s's): \"%sonversation roles must "
                              "alternate user/assistant/user/assistant/...\"", c->t->name, i + 1, CHAT_ROLE[m[i].role], v3 || mx ? "After the optional system message, c" : "C");
            if (pass == 1 && m[i].role == CHAT_SYSTEM && !l2)  // (alternating: a system message at an odd place)
                return st_err(err, errlen, "the %s chat template refuses the conversation (message %d is a system message): \"%s\"", c->t->name, i + 1,
                              f != CHAT_MISTRAL ? "Only user and assistant roles are supported, with the exception of an initial optional system message!"
                                                : "Only user and assistant roles are supported!");
        }
    if (l2) {
        for (int i = sys; i < n; i++) {
            if (m[i].role == CHAT_USER) {
                rc |= chat_puts(out, c->bos) | chat_puts(out, "[INST] ");
                if (sys && i == 1) {  // ('<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content).strip(): only its end can go
                    size_t at = out->n, a, b;
                    rc |= chat_puts(out, "<<SYS>>\n") | chat_put_content(out, &m[0], 0, spans[0]) | chat_puts(out, "\n<</SYS>>\n\n") |
                          chat_put_content(out, &m[i], 0, spans[i]);
                    if (!rc) {
                        chat_trim(out->s + at, out->n - at, &a, &b);
                        out->n = at + b;
                        out->s[out->n] = 0;
                        if (spans[i][1] > out->n) spans[i][1] = out->n;
                        if (spans[i][0] > out->n) spans[i][0] = out->n;
                    }
                } else rc |= chat_put_content(out, &m[i], 1, spans[i]);
                rc |= chat_puts(out, " [/INST]");
            } else if (m[i].role == CHAT_ASSISTANT) {
                rc |= chat_puts(out, " ") | chat_put_content(out, &m[i], 1, spans[i]) | chat_puts(out, " ");
                spans[i][1] = out->n;  // the space before </s> is the answer's
                rc |= chat_puts(out, c->eos);
            }
        }
        return rc ? st_err(err, errlen, "out of memory") : 0;
    }
    rc |= chat_puts(out, c->bos);
    for (int i = sys; i < n; i++) {
        if (m[i].role == CHAT_USER) {
            rc |= chat_puts(out, mx ? " [INST] " : "[INST] ");
            if (sys && i == (mx ? 1 : n - 1)) rc |= chat_put_content(out, &m[0], 0, spans[0]) | chat_puts(out, "\n\n");
            rc |= chat_put_content(out, &m[i], 0, spans[i]) | chat_puts(out, v3 ? "[/INST]" : " [/INST]");
        } else
            rc |= chat_puts(out, v3 || mx ? " " : "") | chat_put_content(out, &m[i], v3, spans[i]) | chat_puts(out, c->eos);
    }
    return rc ? st_err(err, errlen, "out of memory") : 0;
}

// Render messages m[0, n) as the template does into *out (replaced), with add_generation_prompt =
// gen; spans[i] = where message i's content landed in it ([0, 0) for none). 0, or -1 with err (out
// of memory, or a conversation the template refuses, in its words).
static int chat_render(const Chat* c, const ChatMsg* m, int n, int gen, ChatText* out, size_t (*spans)[2], char* err, size_t errlen) {
    out->n = 0;
    int rc = chat_put(out, "", 0), from = 0;
    for (int i = 0; i < n; i++) spans[i][0] = spans[i][1] = 0;
    if (rc) return st_err(err, errlen, "out of memory");
    if (c->t->family == CHAT_QWEN3) return chat_render_qwen3(m, n, gen, out, spans) ? st_err(err, errlen, "out of memory") : 0;
    if (chat_is_inst(c->t->family)) return chat_render_inst(c, m, n, out, spans, err, errlen);
    if (c->t->family == CHAT_PHI3) {  // '<|' + role + '|>\n' + content + '<|end|>\n'; then '<|assistant|>\n' or eos_token
        for (int i = 0; i < n; i++)
            rc |= chat_puts(out, "<|") | chat_puts(out, CHAT_ROLE[m[i].role]) | chat_puts(out, "|>\n") | chat_put_content(out, &m[i], 0, spans[i]) |
                  chat_puts(out, "<|end|>\n");
        rc |= chat_puts(out, gen ? "<|assistant|>\n" : c->eos);
        return rc ? st_err(err, errlen, "out of memory") : 0;
    }
    if (c->t->family == CHAT_CHATML) {
        // {%- if messages[0]['role'] == 'system' %} ... {%- else %} the default system prompt (Qwen2.5's
        // first block; SmolLM2's loop.first test): both give the same bytes
        if (n > 0 && m[0].role != CHAT_SYSTEM)
            rc |= chat_puts(out, "<|im_start|>system\n") | chat_puts(out, c->t->default_system) | chat_puts(out, "<|im_end|>\n");
        for (int i = 0; i < n; i++)  // '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n'
            rc |= chat_puts(out, "<|im_start|>") | chat_puts(out, CHAT_ROLE[m[i].role]) | chat_puts(out, "\n") |
                  chat_put_content(out, &m[i], 0, spans[i]) | chat_puts(out, "<|im_end|>\n");
        if (gen) rc |= chat_puts(out, "<|im_start|>assistant\n");  // {%- if add_generation_prompt %}
        return rc ? st_err(err, errlen, "out of memory") : 0;
    }
    rc |= chat_puts(out, c->bos);  // bos_token (Llama 3: inside the first message's block; same bytes)
    if (c->t->family == CHAT_LLAMA31) {  // the system block, always written
        rc |= chat_puts(out, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ") |
              chat_puts(out, c->date) | chat_puts(out, "\n\n");
        if (n > 0 && m[0].role == CHAT_SYSTEM) rc |= chat_put_content(out, &m[0], 1, spans[0]), from = 1;
        rc |= chat_puts(out, "<|eot_id|>");
    }
    for (int i = from; i < n; i++)  // '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>'
        rc |= chat_puts(out, "<|start_header_id|>") | chat_puts(out, CHAT_ROLE[m[i].role]) | chat_puts(out, "<|end_header_id|>\n\n") |
              chat_put_content(out, &m[i], 1, spans[i]) | chat_puts(out, "<|eot_id|>");
    if (gen) rc |= chat_puts(out, "<|start_header_id|>assistant<|end_header_id|>\n\n");  // {%- if add_generation_prompt %}
    return rc ? st_err(err, errlen, "out of memory") : 0;
}

// A rendering's ids: work's text encoded whole with special tokens matched, as
// apply_chat_template(tokenize=True) does, into (*ids, *nids, *icap) (replaced). 0, or -1: out of memory.
static int chat_tokenize(Tokenizer* tok, const ChatText* work, uint32_t** ids, size_t* nids, size_t* icap) {
    int keep = tok->hf->match_specials;
    tok->hf->match_specials = 1;
    *nids = 0;
    int rc = tokenizer_encode(tok, (const unsigned char*)work->s, work->n, ids, nids, icap);
    tok->hf->match_specials = keep;
    return rc;
}

// Token i's decoded bytes b[0, len) against the text at s[0, n): the bytes of s it stands for, or
// -1. A SentencePiece-style tokenizer decodes R (what it makes of ' ', "▁") as a space, so there a
// space stands for either (rep[0, replen); replen 0: byte-level BPE).
static long chat_match(const char* b, size_t len, const char* s, size_t n, const unsigned char* rep, size_t replen) {
    size_t at = 0;
    for (size_t i = 0; i < len; i++) {
        if (at < n && s[at] == b[i]) at++;
        else if (replen && b[i] == ' ' && at + replen <= n && !memcmp(s + at, rep, replen)) at += replen;
        else return -1;
    }
    return (long)at;
}

// Does a SentencePiece-style tokenizer put a "▁" before the stretch of text at s[at, n) (between
// added tokens; first: the text's first)? Prepend("▁") in the normalizer (the legacy files: every
// stretch), Metaspace's prepend_scheme "always" (a stretch that does not start with R), "first"
// (that, and only the text's first stretch).
static int chat_prepends(const TokenizerHF* h, const char* s, size_t n, size_t at, int first) {
    for (int k = 0; k < h->nnorms; k++) if (h->norms[k].kind == TOKENIZER_NORM_PREPEND) return 1;
    if (!h->metaspace) return 0;
    size_t rl = (size_t)h->space_rep_len;
    int starts_r = at < n && (s[at] == ' ' || (rl && at + rl <= n && !memcmp(s + at, h->space_rep, rl)));
    return !starts_r && (h->prepend_scheme == TOKENIZER_PREPEND_ALWAYS || (h->prepend_scheme == TOKENIZER_PREPEND_FIRST && first));
}

// Where each token of ids[0, nid) lies in the text s[0, n) it encodes: token i holds [ends[i - 1],
// ends[i]) (ends[-1] = 0). The decoded bytes spell the text, but for a SentencePiece-style
// tokenizer's additions: the "▁" put before a stretch of text (chat_prepends: a space no byte
// holds, skipped) and the whitespace beside an added token with lstrip / rstrip (the token's:
// tokenizers' offsets give it the token too). 0, or -1 when the ids do not spell s.
static int chat_align(const Tokenizer* tok, const char* s, size_t n, const uint32_t* ids, size_t nid, size_t* ends) {
    const TokenizerHF* h = tok->hf;
    uint32_t top = 0;
    for (int a = 0; a < h->nadded; a++) if (h->added[a].id + 1 > top) top = h->added[a].id + 1;
    uint8_t* bits = (uint8_t*)calloc(top + 1, 1);  // per added id: 1 added, 2 lstrip, 4 rstrip
    if (!bits) return -1;
    for (int a = 0; a < h->nadded; a++) bits[h->added[a].id] = (uint8_t)(1 | h->added[a].lstrip << 1 | h->added[a].rstrip << 2);
    const unsigned char* rep = h->sp ? h->space_rep : NULL;
    size_t replen = h->sp ? (size_t)h->space_rep_len : 0, at = 0;
    int stretch = 1;  // the next token starts a stretch of text (the text's start, or after an added token)
    for (size_t i = 0; i < nid; i++) {
        uint32_t id = ids[i], len = tok->token_len[id], f = id < top ? bits[id] : 0;
        const char* b = tok->token_table[id];
        int wl;
        long got = -1;
        if (!f && stretch && h->sp && len > 0 && b[0] == ' ' && chat_prepends(h, s, n, at, i == 0)) got = chat_match(b + 1, len - 1, s + at, n - at, rep, replen);
        if (got < 0) got = chat_match(b, len, s + at, n - at, rep, replen);
        while (got < 0 && (f & 2) && at < n && tokenizer_char_class((const unsigned char*)s + at, n - at, &wl) == UC_S)  // lstrip
            at += (size_t)wl, got = chat_match(b, len, s + at, n - at, rep, replen);
        if (got < 0 && h->sp && len > 0 && b[0] == ' ') got = chat_match(b + 1, len - 1, s + at, n - at, rep, replen);  // (a prepend not foreseen)
        if (got < 0) { free(bits); return -1; }
        at += (size_t)got;
        while ((f & 4) && at < n && tokenizer_char_class((const unsigned char*)s + at, n - at, &wl) == UC_S) at += (size_t)wl;  // rstrip
        ends[i] = at;
        stretch = f != 0;
    }
    free(bits);
    return at == n ? 0 : -1;
}

// Render m[0, n) and encode it whole (special tokens matched, as apply_chat_template(tokenize=True)):
// ids into (*ids, *nids, *icap) (replaced), the loss mask (1 = predicting this token counts) into
// *mask (nids bytes, realloc'ed). work: scratch (the rendering, kept for the caller to read).
// 0, or -1 with err (out of memory, a conversation the template refuses, or the ids do not spell
// the rendering: a bug, named).
static int chat_encode(const Chat* c, Tokenizer* tok, const ChatMsg* m, int n, ChatText* work, uint32_t** ids, size_t* nids, size_t* icap,
                       uint8_t** mask, char* err, size_t errlen) {
    size_t(*spans)[2] = (size_t(*)[2])malloc(sizeof(*spans) * (size_t)(n > 0 ? n : 1));
    if (!spans) return st_err(err, errlen, "out of memory");
    if (chat_render(c, m, n, 0, work, spans, err, errlen) != 0) { free(spans); return -1; }
    int rc = chat_tokenize(tok, work, ids, nids, icap);
    uint8_t* nm = rc ? NULL : (uint8_t*)realloc(*mask, *nids ? *nids : 1);
    size_t* ends = rc ? NULL : (size_t*)malloc(sizeof(size_t) * (*nids ? *nids : 1));
    if (!nm || !ends) { if (nm) *mask = nm; free(ends); free(spans); return st_err(err, errlen, "out of memory"); }
    *mask = nm;
    // token spans: the ids decode to the rendering, or (a normalizer) to it with NFC contents
    ChatText norm = {NULL, 0, 0};
    const char* spell = work->s;
    size_t spell_n = work->n;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (chat_align(tok, spell, spell_n, *ids, *nids, ends) == 0) break;
        if (attempt == 1 || !tok->hf->nfc) {
            free(norm.s); free(ends); free(spans);
            return st_err(err, errlen, "internal: the ids of a rendering (%zu bytes) do not spell it", work->n);
        }
        ChatMsg* mm = (ChatMsg*)malloc(sizeof(ChatMsg) * (size_t)(n > 0 ? n : 1));
        char** nfc = (char**)calloc((size_t)(n > 0 ? n : 1), sizeof(char*));
        rc = !mm || !nfc;
        for (int i = 0; i < n && !rc; i++) {  // NFC of each content (the template text is ASCII)
            const unsigned char* t;
            size_t tn;
            mm[i] = m[i];
            if (tokenizer_nfc(tok->hf, (const unsigned char*)m[i].content, m[i].len, &t, &tn) != 0 || !(nfc[i] = (char*)malloc(tn + 1))) { rc = 1; break; }
            memcpy(nfc[i], t, tn);
            mm[i].content = nfc[i];
            mm[i].len = tn;
        }
        if (!rc) rc = chat_render(c, mm, n, 0, &norm, spans, err, errlen);
        for (int i = 0; nfc && i < n; i++) free(nfc[i]);
        free(nfc);
        free(mm);
        if (rc) { free(norm.s); free(ends); free(spans); return st_err(err, errlen, "out of memory"); }
        spell = norm.s;
        spell_n = norm.n;
    }
    size_t at = 0;
    int k = 0;  // the next counted message that does not end before `at` (counted spans and tokens both run forward)
    for (size_t i = 0; i < *nids; i++) {  // token i spans [at, ends[i]) of spell
        uint32_t id = (*ids)[i];
        size_t e = ends[i];
        int wl;
        if (e == at && at < spell_n) tokenizer_char_class((const unsigned char*)spell + at, spell_n - at, &wl), e = at + (size_t)wl; // a lone
        while (k < n && (!m[k].counted || spans[k][1] < at)) k++;  // prepended "▁": tokenizers gives it the next character's offsets
        size_t a = k < n ? spans[k][0] : 0, b = k < n ? spans[k][1] : 0;
        int count = k < n && ((at < b && e > a) || (id == c->end_of_turn && at == b));  // the content, or the end of turn right after it
        (*mask)[i] = (uint8_t)count;
        at = ends[i];
    }
    free(norm.s);
    free(ends);
    free(spans);
    return 0;
}

// A prompt m[0, n) (its last message the user's or the system's) as -prompt gives it to the model:
// rendered with the generation prompt and encoded whole with special tokens matched, as
// apply_chat_template(messages, add_generation_prompt=True, tokenize=True) does: the rendering's own
// BOS (Llama 3) is its first id, ChatML has none. ids into (*ids, *nids, *icap) (replaced); work:
// scratch (the rendering, left for the caller). 0, or -1 with err.
static int chat_encode_prompt(const Chat* c, Tokenizer* tok, const ChatMsg* m, int n, ChatText* work, uint32_t** ids, size_t* nids, size_t* icap,
                              char* err, size_t errlen) {
    if (n > 0 && m[n - 1].role == CHAT_ASSISTANT)
        return st_err(err, errlen, "the last message is the assistant's: a prompt ends with the user's turn (the reply is what is generated)");
    size_t(*spans)[2] = (size_t(*)[2])malloc(sizeof(*spans) * (size_t)(n > 0 ? n : 1));
    if (!spans) return st_err(err, errlen, "out of memory");
    int rc = chat_render(c, m, n, 1, work, spans, err, errlen);
    free(spans);
    if (rc) return -1;
    return chat_tokenize(tok, work, ids, nids, icap) ? st_err(err, errlen, "out of memory") : 0;
}

#endif // ZT_CHAT_H
