// prompts.h — fine-tuning data: `-tokenize data.jsonl` into llm.c token shards plus a loss mask
// beside each (PATH.mask, the format in dataloader.h). One JSON object per line, in one of TRL's two
// dataset formats (one format per file):
//   prompt/completion strings: {"prompt": "...", "completion": "..."}; encoded separately, as TRL does;
//   conversations: {"messages": [{"role", "content"}, ...]} or {"prompt": [messages], "completion":
//     [messages]}; rendered with the model's chat template and encoded whole (chat.h).
//
// Packing, for the T given by -t (recorded in every mask file; training with another T is an error):
//   the stream is  D e1 D e2 D ...  where D is the tokenizer's document token (GPT-2's EOT; a
//   tokenizer.json's tok->eot_token) and each example e is placed together with the D before it
//   (the one that ended the example before, the shard's first token, or padding) inside one
//   sample: a *sample* is T+1 tokens starting at a multiple of T (dataloader.h); an example that
//   does not fit in what is left of the current sample starts the next, the gap padded with D.
//   No example crosses a sample boundary.
//   Strings: e = the prompt's tokens, the completion's; the D after it counts (the model learns to
//     stop). An example longer than T tokens loses the *start of its prompt* (left truncation,
//     counted and reported); one whose completion + D alone is longer than T is refused, naming its line.
//   Conversations: e = the rendering's tokens, without its first token when that is D (Llama's
//     BOS: the D before the example is it, and opens it); a rendering that does not start with D
//     (ChatML) opens at its own first token, the D before it left outside the example: isolated
//     (-doc-attention 1) it reads exactly what apply_chat_template renders, as at inference; counted: each counted assistant message's content and
//     the end-of-turn token after it (chat.h says exactly which tokens); the D after it does not
//     count (the template's end-of-turn token is the stop). "messages": every assistant message
//     counts; prompt/completion lists: the completion's (assistant messages only), not the
//     prompt's. The last message must be the assistant's. A conversation longer than T - 1 tokens
//     loses whole turns from its start (a turn: a user message and what follows it up to the next
//     user message), keeping a first system message, re-rendered until it fits (counted as cut);
//     one whose last turn alone does not fit is refused, naming its line.
// The prompt, the D before an example and the padding never count. The mask (version 2) records
// where each example starts: bit 1 on the token that opens it (the D before it; a ChatML
// conversation's first token). With
// -doc-attention 1 (the default for such data) each packed example attends only to itself, at
// positions from 0, as it would alone at the start of a sample (docs/packing.md).
// Splits: example i goes to the val shards when val_every > 0 and i % val_every == val_every - 1.
// Shards: at most shard_tokens tokens (at least one sample), named as -tokenize names them.
// Errors (exit 2 in the caller): the line number and what is wrong (bad JSON, a missing field, a
// field that is not a string or a list of messages, an unknown role, a missing or non-string
// content, invalid UTF-8, an example that cannot fit, a chat template this build does not render
// (naming tokenizer_config.json and its hash)); every file this run wrote is removed again.
//
// -prompt's side (below tokenize_prompts_to_shards): prompt_file_read reads @FILE as a stream (a
// pipe, /dev/stdin, <(...) or a file: its size is never trusted), prompt_split cuts it into prompts
// (plain text: one per non-empty line; FILE.jsonl: one JSON string per line, so a prompt may hold
// newlines, e.g. "Q: ...\nA:"; a {"prompt": ...} object, the training format, also works; a
// {"messages": [...]} object is a conversation for the chat template), prompt_encode makes a
// prompt's ids (through the chat template with the generation prompt, or the text after the
// document token: never a second BOS), and sample_token is the sampling rule of -prompt and the
// samples (-temperature, -top-k, greedy).
//
// defines: PromptStats, tokenize_prompts_to_shards, prompt_messages, prompt_conversation, PromptList, prompt_file_read, prompt_split,
//          prompt_list_free, prompt_encode, sample_token
//
// May call: safetensors.h (the JSON parser), tokenizer.h, dataloader.h and chat.h.
#ifndef ZT_PROMPTS_H
#define ZT_PROMPTS_H

#include <math.h>
#include <sys/stat.h>
#include "safetensors.h" // defines: Json, json_parse, json_get (the strict parser)
#include "tokenizer.h"   // defines: Tokenizer, tokenizer_encode, tokenize_shard_path
#include "dataloader.h"  // defines: write_token_shard, MASK_MAGIC
#include "chat.h"        // defines: Chat, ChatMsg, chat_init, chat_encode (conversations: chat templates in C)

#define PROMPT_EOT 50256  // GPT-2's; a tokenizer.json brings its own document token (tok->eot_token)

typedef struct {
    int64_t examples[2], tokens[2], counted[2]; // [0] train, [1] val
    int64_t cut;                                // examples cut at the start (a prompt's start; a conversation's first turns)
    int shards[2];
    char chat_template[16];                     // conversations: the template recognised ("" for strings)
    char chat_date[32];                         // and the date its system block wrote ("" for none)
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

// Append id (with its mask byte m) to a growable id array and its mask (mask holds *nids bytes).
static int prompt_push_id(uint32_t** ids, size_t* nids, size_t* icap, uint8_t** mask, uint32_t id, uint8_t m) {
    if (*nids == *icap) {
        size_t cap = *icap ? 2 * *icap : 64;
        uint32_t* ni = (uint32_t*)realloc(*ids, sizeof(uint32_t) * cap);
        if (!ni) return -1;
        *ids = ni;
        *icap = cap;
    }
    uint8_t* nm = (uint8_t*)realloc(*mask, *nids + 1);
    if (!nm) return -1;
    *mask = nm;
    (*ids)[*nids] = id;
    (*mask)[(*nids)++] = m;
    return 0;
}

// Write the mask of a shard atomically (temporary name, fsync, rename), in format `version` (1: the
// bytes are 0/1, no example starts; MASK_VERSION: bit 1 marks them; dataloader.h).
static int write_mask_file(const char* path, const uint8_t* mask, int64_t n, int T, int version, char* err, size_t errlen) {
    char tmp[4400];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE* f = fopen(tmp, "wb");
    if (!f) return st_err(err, errlen, "mask %s: cannot create: %s", tmp, strerror(errno));
    int32_t h[SHARD_HEADER_INTS] = {0};
    h[0] = MASK_MAGIC; h[1] = version; h[2] = (int32_t)n; h[3] = T;
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
    char derr[1024], mpath[4200];
    snprintf(mpath, sizeof(mpath), "%s.mask", path); // the mask first: a shard never has its name without its mask
    if (write_mask_file(mpath, s->mask, s->n, T, MASK_VERSION, err, errlen)) return -1;
    snprintf(written[(*nwritten)++], 4200, "%s", mpath);
    if (tokenize_write_ids(path, s->tok, (size_t)s->n, s->V, derr, sizeof(derr))) return st_err(err, errlen, "%s", derr);
    snprintf(written[(*nwritten)++], 4200, "%s", path);
    tokenize_fault_after_shard();
    st->tokens[which] += s->n;
    st->shards[which]++;
    s->n = 0;
    s->ws = 0;
    return prompt_push(s, s->eot, 0); // every shard starts with the EOT before its first example
}

// Place one example in split s: ids[0, n) with their mask bytes, the last one the document token
// that ends it (and leads the next). It goes in the current sample when it fits after the token
// before it; else that sample is padded with the document token and it starts the next (closing
// the shard first when the next sample would pass shard_tokens). The token that opens it gets
// MASK_STARTS: the one before it (the document token: a string example's, or Llama 3's BOS standing
// for its rendering's own), or with self_open its own first token (a chat rendering that does not
// start with the document token, ChatML's: isolated by -doc-attention it then starts exactly as
// apply_chat_template renders it, no token of ours before it). 0, or -1 with err.
static int prompt_place(PromptSplit* s, const uint32_t* ids, const uint8_t* mask, int64_t n, int self_open, int T, int64_t shard_tokens,
                        const char* prefix, char (**written)[4200], int* nwritten, int* max_files, PromptStats* st, int which, char* err,
                        size_t errlen) {
    if (s->n + n - 1 > s->ws + T) { // does not fit in this sample: pad it, move to the next
        while (s->n < s->ws + T + 1) if (prompt_push(s, s->eot, 0)) return st_err(err, errlen, "out of memory");
        if (s->ws + 2 * T + 1 > shard_tokens) { // a next sample would overflow the shard: close it
            if (*nwritten + 2 > *max_files) {
                char (*nw)[4200] = (char (*)[4200])realloc(*written, sizeof(**written) * 2 * *max_files);
                if (!nw) return st_err(err, errlen, "out of memory");
                *written = nw;
                *max_files *= 2;
            }
            if (prompt_flush(s, T, prefix, *written, nwritten, st, which, err, errlen)) return -1;
        } else {
            s->ws += T; // the next sample starts at this one's last token
        }
    }
    if (!self_open) s->mask[s->n - 1] |= MASK_STARTS; // the D before the example opens it (s->n >= 1: every shard starts with one)
    for (int64_t i = 0; i < n; i++)
        if (prompt_push(s, ids[i], (uint8_t)(mask[i] | (self_open && i == 0 ? MASK_STARTS : 0)))) return st_err(err, errlen, "out of memory");
    return 0;
}

// A JSON list of messages (node `list` of j, the line's "messages", "prompt" or "completion") appended
// to (*m, *n): role and content checked. counted: 1 for a completion's messages (all the assistant's),
// 2 for "messages" (its assistant messages count), 0 for a prompt. 0, or -1 with err naming file:line.
static int prompt_messages(const Json* j, int list, const char* field, int counted, ChatMsg** m, int* n, int* cap, const char* path,
                           long long lineno, char* err, size_t errlen) {
    if (j->nodes[list].type != JSON_ARRAY) return st_err(err, errlen, "%s:%lld: \"%s\" is not a list of messages", path, lineno, field);
    int k = 0;
    for (int e = j->nodes[list].first; e >= 0; e = j->nodes[e].next, k++) {
        int r = json_get(j, e, "role"), c = json_get(j, e, "content"), role = -1;
        if (j->nodes[e].type != JSON_OBJECT) return st_err(err, errlen, "%s:%lld: %s[%d] is not a message object ({\"role\": ..., \"content\": ...})", path, lineno, field, k);
        if (r < 0 || j->nodes[r].type != JSON_STRING) return st_err(err, errlen, "%s:%lld: %s[%d] has no string \"role\"", path, lineno, field, k);
        for (int q = 0; q < 3; q++) if (!strcmp(j->nodes[r].str, CHAT_ROLE[q])) role = q;
        if (role < 0) return st_err(err, errlen, "%s:%lld: %s[%d]: unknown role \"%.60s\" (system, user or assistant)", path, lineno, field, k, j->nodes[r].str);
        if (json_get(j, e, "tool_calls") >= 0) return st_err(err, errlen, "%s:%lld: %s[%d]: tool calls are not supported", path, lineno, field, k);
        if (json_get(j, e, "reasoning_content") >= 0)
            return st_err(err, errlen, "%s:%lld: %s[%d]: a separate \"reasoning_content\" is not supported (write it in the content: "
                          "<think>...</think> then the answer, which Qwen3's template splits the same way)", path, lineno, field, k);
        if (c < 0) return st_err(err, errlen, "%s:%lld: %s[%d] has no \"content\"", path, lineno, field, k);
        if (j->nodes[c].type != JSON_STRING) return st_err(err, errlen, "%s:%lld: %s[%d]: \"content\" is not a string", path, lineno, field, k);
        if (counted == 1 && role != CHAT_ASSISTANT) return st_err(err, errlen, "%s:%lld: %s[%d] is a \"%s\" message: a completion holds the assistant's messages only", path, lineno, field, k, CHAT_ROLE[role]);
        if (*n == *cap) {
            int nc = *cap ? 2 * *cap : 16;
            ChatMsg* nm = (ChatMsg*)realloc(*m, sizeof(ChatMsg) * (size_t)nc);
            if (!nm) return st_err(err, errlen, "out of memory");
            *m = nm;
            *cap = nc;
        }
        ChatMsg* msg = &(*m)[(*n)++];
        msg->role = role;
        msg->content = j->nodes[c].str;
        msg->len = (size_t)j->nodes[c].len;
        msg->counted = counted && role == CHAT_ASSISTANT;
    }
    if (k == 0) return st_err(err, errlen, "%s:%lld: \"%s\" is an empty list", path, lineno, field);
    return 0;
}

// One conversation m[0, n) (its last message the assistant's) encoded for packing: its ids and mask
// without the leading document token (Llama's rendering starts with the BOS, which is that token:
// the one before the example stands for it), at most T - 1 of them (the document token after it
// must fit too). Too long: whole turns are dropped from the start, as few as make it fit, a turn
// being a user message and what follows it up to the next user message; a system message first
// stays. *cut = 1 when that happened. 0, or -1 with err naming the line when the last turn alone
// does not fit. Every message of a rendering is a block between special tokens, tokenised on its
// own, so the length falls with every turn dropped: the fewest drops are found by bisection
// (a few encodings per conversation, not one per turn).
static int prompt_conversation(Chat* chat, Tokenizer* tok, ChatMsg* m, int n, int T, uint32_t eot, ChatText* work, uint32_t** ids, size_t* nids,
                               size_t* icap, uint8_t** mask, int64_t* skip, int* cut, const char* path, long long lineno, char* err, size_t errlen) {
    int sys = m[0].role == CHAT_SYSTEM; // messages [0, sys) and [from, n) are rendered
    ChatMsg* sel = (ChatMsg*)malloc(sizeof(ChatMsg) * (size_t)n);
    int* from = (int*)malloc(sizeof(int) * (size_t)n); // the candidate starts: no drop, then each user message after it
    if (!sel || !from) { free(sel); free(from); return st_err(err, errlen, "out of memory"); }
    int nf = 0, encoded = -1, rc = 0;
    from[nf++] = sys;
    for (int k = sys + 1; k < n; k++) if (m[k].role == CHAT_USER) from[nf++] = k;
    int64_t len = 0;
    for (int step = 0, lo = -1, hi = nf - 1, at = 0; !rc; step++) { // invariant: from[lo] does not fit, from[hi] may
        if (encoded != at) {
            int k = 0;
            if (sys) sel[k++] = m[0];
            for (int i = from[at]; i < n; i++) sel[k++] = m[i];
            char cerr[512];
            if (chat_encode(chat, tok, sel, k, work, ids, nids, icap, mask, cerr, sizeof(cerr))) { rc = st_err(err, errlen, "%s:%lld: %s", path, lineno, cerr); break; }
            encoded = at;
            *skip = *nids > 0 && (*ids)[0] == eot;
            len = (int64_t)*nids - *skip;
        }
        int fits = len + 1 <= T;
        if (step == 0 && fits) break;           // the whole conversation fits: the usual case
        if (step == 0) { lo = 0; at = hi; continue; }
        if (step == 1 && !fits) {
            rc = st_err(err, errlen, "%s:%lld: the conversation's last turn (%s%d message(s) from its last user message on) is %lld tokens: with the "
                        "document token after it longer than T = %d. HINT: a larger -t", path, lineno, sys ? "the system prompt and " : "", n - from[at],
                        (long long)len, T);
            break;
        }
        if (fits) hi = at;
        else lo = at;
        if (hi - lo <= 1) {
            if (encoded == hi) break;
            at = hi;   // encode from[hi] (it fits), then stop
            continue;
        }
        at = lo + (hi - lo) / 2;
    }
    if (!rc && len + 1 > T) rc = st_err(err, errlen, "%s:%lld: internal: the conversation cut to fit is %lld tokens", path, lineno, (long long)len);
    *cut = !rc && encoded > 0;
    free(sel);
    free(from);
    return rc;
}

// The whole job; returns 0, or -1 with err naming the file and line (and every written file removed).
// chat_date: -chat-date (YYYY-MM-DD, "" for the template's default), for conversations only.
static int tokenize_prompts_to_shards(Tokenizer* tok, const char* in_path, const char* prefix, int T, int val_every,
                                      int64_t shard_tokens, const char* chat_date, PromptStats* st, char* err, size_t errlen) {
    memset(st, 0, sizeof(*st));
    if (T < 2) return st_err(err, errlen, "-t %d: packing needs T >= 2", T);
    if (shard_tokens < T + 1) shard_tokens = T + 1;
    FILE* in = fopen(in_path, "rb"); // (a stream: a pipe or FIFO is read as given, on purpose)
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
    int nwritten = 0, rc = written ? 0 : st_err(err, errlen, "out of memory");
    char* line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int64_t lineno = 0, example = 0;
    int format = 0, chat_ready = 0, nmsg = 0, mcap = 0; // format: 1 prompt/completion strings, 2 conversations
    Chat chat;
    ChatText work = {NULL, 0, 0};
    ChatMsg* msgs = NULL;
    uint32_t* ids = NULL;
    uint8_t* mask = NULL;
    size_t nids = 0, icap = 0;
    for (int k = 0; k < 2 && !rc; k++) rc = prompt_push(&sp[k], sp[k].eot, 0) ? st_err(err, errlen, "out of memory") : 0;
    while (rc == 0 && (len = getline(&line, &lcap, in)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue; // blank lines are allowed between records
        Json j;
        char jerr[256];
        if (json_parse(&j, line, (size_t)len, jerr, sizeof(jerr))) { rc = st_err(err, errlen, "%s:%lld: %s", in_path, (long long)lineno, jerr); json_free(&j); break; }
        int fp = json_get(&j, 0, "prompt"), fc = json_get(&j, 0, "completion"), fm = json_get(&j, 0, "messages");
        int is_chat = fm >= 0 || (fp >= 0 && j.nodes[fp].type == JSON_ARRAY) || (fc >= 0 && j.nodes[fc].type == JSON_ARRAY);
        if (j.nodes[0].type != JSON_OBJECT) rc = st_err(err, errlen, "%s:%lld: not a JSON object", in_path, (long long)lineno);
        else if (fm < 0 && (fp < 0 || fc < 0))
            rc = st_err(err, errlen, "%s:%lld: no \"%s\" field (each line needs \"messages\", or \"prompt\" and \"completion\": strings, or lists of messages)",
                        in_path, (long long)lineno, fp < 0 ? "prompt" : "completion");
        else if (fm < 0 && (j.nodes[fp].type == JSON_ARRAY) != (j.nodes[fc].type == JSON_ARRAY))
            rc = st_err(err, errlen, "%s:%lld: \"%s\" is a list of messages and \"%s\" is not: both strings, or both lists of messages", in_path,
                        (long long)lineno, j.nodes[fp].type == JSON_ARRAY ? "prompt" : "completion", j.nodes[fp].type == JSON_ARRAY ? "completion" : "prompt");
        else if (!is_chat && (j.nodes[fp].type != JSON_STRING || j.nodes[fc].type != JSON_STRING))
            rc = st_err(err, errlen, "%s:%lld: \"%s\" is not a string (nor a list of messages)", in_path, (long long)lineno, j.nodes[fp].type != JSON_STRING ? "prompt" : "completion");
        else if (format && format != 1 + is_chat)
            rc = st_err(err, errlen, "%s:%lld: %s, but the lines before are %s: one format per file", in_path, (long long)lineno,
                        is_chat ? "a conversation" : "prompt/completion strings", is_chat ? "prompt/completion strings" : "conversations");
        if (rc) { json_free(&j); break; }
        format = 1 + is_chat;
        int which = val_every > 0 && example % val_every == val_every - 1;
        PromptSplit* s = &sp[which];
        int64_t n = 0, skip = 0, counted = 0;
        if (is_chat) {
            if (!chat_ready && chat_init(&chat, tok, chat_date, err, errlen)) { rc = -1; json_free(&j); break; }
            chat_ready = 1;
            nmsg = 0;
            if (fm >= 0) rc = prompt_messages(&j, fm, "messages", 2, &msgs, &nmsg, &mcap, in_path, (long long)lineno, err, errlen);
            else rc = prompt_messages(&j, fp, "prompt", 0, &msgs, &nmsg, &mcap, in_path, (long long)lineno, err, errlen) ||
                      prompt_messages(&j, fc, "completion", 1, &msgs, &nmsg, &mcap, in_path, (long long)lineno, err, errlen);
            if (!rc && msgs[nmsg - 1].role != CHAT_ASSISTANT)
                rc = st_err(err, errlen, "%s:%lld: the last message is the %s's: a conversation ends with the assistant's answer (what is learned)", in_path,
                            (long long)lineno, CHAT_ROLE[msgs[nmsg - 1].role]);
            int cut = 0;
            if (!rc) rc = prompt_conversation(&chat, tok, msgs, nmsg, T, s->eot, &work, &ids, &nids, &icap, &mask, &skip, &cut, in_path, (long long)lineno, err, errlen);
            json_free(&j);
            if (rc) break;
            st->cut += cut;
            n = (int64_t)nids - skip + 1; // the conversation and the document token after it (not counted)
            if (prompt_push_id(&ids, &nids, &icap, &mask, s->eot, 0)) { rc = st_err(err, errlen, "out of memory"); break; }
            for (size_t i = (size_t)skip; i < nids; i++) counted += mask[i];
        } else {
            nids = 0;
            if (tokenizer_encode(tok, (const unsigned char*)j.nodes[fp].str, (size_t)j.nodes[fp].len, &ids, &nids, &icap)) rc = st_err(err, errlen, "tokenizer: out of memory");
            size_t np = nids;
            if (!rc && tokenizer_encode(tok, (const unsigned char*)j.nodes[fc].str, (size_t)j.nodes[fc].len, &ids, &nids, &icap)) rc = st_err(err, errlen, "tokenizer: out of memory");
            json_free(&j);
            if (rc) break;
            int64_t nc = (int64_t)(nids - np);
            if (nc + 1 > T) { rc = st_err(err, errlen, "%s:%lld: the completion is %lld tokens: with its EOT longer than T = %d. HINT: a larger -t", in_path, (long long)lineno, (long long)nc, T); break; }
            if ((int64_t)nids + 1 > T) { skip = (int64_t)nids + 1 - T; st->cut++; } // cut the prompt's start
            n = (int64_t)nids - skip + 1;                                            // tokens placed, EOT included
            uint8_t* nm = (uint8_t*)realloc(mask, nids + 1);
            if (!nm || prompt_push_id(&ids, &nids, &icap, &nm, s->eot, 1)) { mask = nm; rc = st_err(err, errlen, "out of memory"); break; }
            mask = nm;
            for (size_t i = 0; i + 1 < nids; i++) mask[i] = i >= np; // the completion and the EOT after it count
            counted = nc + 1;
        }
        example++;
        if (prompt_place(s, ids + skip, mask + skip, n, is_chat && !skip, T, shard_tokens, prefix, &written, &nwritten, &max_files, st, which, err, errlen)) { rc = -1; break; }
        st->examples[which]++;
        st->counted[which] += counted;
    }
    if (rc == 0 && ferror(in)) rc = st_err(err, errlen, "%s: read error", in_path);
    if (rc == 0 && example == 0) rc = st_err(err, errlen, "%s: no examples", in_path);
    for (int k = 0; k < 2 && rc == 0; k++) {
        if (nwritten + 2 > max_files) {
            char (*nw)[4200] = (char (*)[4200])realloc(written, sizeof(*written) * 2 * max_files);
            if (!nw) { rc = st_err(err, errlen, "out of memory"); break; }
            written = nw;
            max_files *= 2;
        }
        if (prompt_flush(&sp[k], T, prefix, written, &nwritten, st, k, err, errlen)) rc = -1;
    }
    if (rc) for (int i = 0; i < nwritten; i++) remove(written[i]); // nothing half-done survives
    fclose(in);
    if (chat_ready) {
        snprintf(st->chat_template, sizeof(st->chat_template), "%s", chat.t->name);
        snprintf(st->chat_date, sizeof(st->chat_date), "%s", chat.date);
    }
    free(line);
    free(ids);
    free(mask);
    free(msgs);
    free(work.s);
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
    FILE* f = fopen(path, "rb"); // (a pipe is read as given, on purpose: -prompt @/dev/stdin, @<(...))
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

// Each prompt's bytes (NUL-terminated too); msgs[i] = 1: text[i] is a .jsonl line holding a
// "messages" list (read by prompt_encode), from line[i] of the file (0: not from a file).
typedef struct { int n; char** text; size_t* len; int* msgs; long long* line; } PromptList;

static int prompt_list_add(PromptList* pl, const char* s, size_t n, int msgs, long long line) {
    char** t = (char**)realloc(pl->text, sizeof(char*) * (pl->n + 1));
    if (!t) return -1;
    pl->text = t;
    size_t* l = (size_t*)realloc(pl->len, sizeof(size_t) * (pl->n + 1));
    if (!l) return -1;
    pl->len = l;
    int* mm = (int*)realloc(pl->msgs, sizeof(int) * (pl->n + 1));
    if (!mm) return -1;
    pl->msgs = mm;
    long long* ln = (long long*)realloc(pl->line, sizeof(long long) * (pl->n + 1));
    if (!ln) return -1;
    pl->line = ln;
    char* c = (char*)malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s, n);
    c[n] = 0;
    pl->text[pl->n] = c;
    pl->msgs[pl->n] = msgs;
    pl->line[pl->n] = line;
    pl->len[pl->n++] = n;
    return 0;
}

static void prompt_list_free(PromptList* pl) {
    for (int i = 0; i < pl->n; i++) free(pl->text[i]);
    free(pl->text);
    free(pl->len);
    free(pl->msgs);
    free(pl->line);
    memset(pl, 0, sizeof(*pl));
}

// The prompts in text[0, len): jsonl = 0, one per non-empty line (a trailing \r dropped); jsonl = 1,
// each non-blank line one JSON string, an object with a string "prompt", or an object with a
// "messages" list (a conversation so far, for the chat template: prompt_encode). `name` is for
// messages (FILE:LINE). 0, or -1 with err.
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
            if (prompt_list_add(pl, line, n, 0, lineno)) { prompt_list_free(pl); return st_err(err, errlen, "%s: out of memory", name); }
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
        int msgs = j.nodes[0].type == JSON_OBJECT && node < 0 && json_get(&j, 0, "messages") >= 0;
        if (!msgs && (node < 0 || j.nodes[node].type != JSON_STRING)) {
            json_free(&j);
            prompt_list_free(pl);
            return st_err(err, errlen, "%s:%lld: not a JSON string (nor an object with a string \"prompt\" or a \"messages\" list)", name, lineno);
        }
        int rc = msgs ? prompt_list_add(pl, line, n, 1, lineno)
                      : j.nodes[node].len == 0 ? 0 : prompt_list_add(pl, j.nodes[node].str, (size_t)j.nodes[node].len, 0, lineno);
        json_free(&j);
        if (rc) { prompt_list_free(pl); return st_err(err, errlen, "%s: out of memory", name); }
    }
    return 0;
}

// Prompt k of pl (read from `name`) as -prompt gives it to the model, into (*ids, *nids, *icap)
// (replaced); *added: how many ids before the prompt's own were put there (printed as not the user's).
// chat (the model's recognised template, -chat-prompt on): a text is the user's message, a "messages"
// line its list (the last message not the assistant's), rendered with the generation prompt
// (chat_encode_prompt); nothing is added: the template writes its BOS where it has one (Llama 3,
// Mistral), ChatML and Phi-3 have none. chat NULL: the text encoded as it is (special tokens matched: docs/tokenizers.md)
// after the document token doc, unless its first id already is doc or bos (a prompt rendered
// elsewhere, by apply_chat_template: never a second BOS); a "messages" line is refused. Every id must
// be below V. 0, or -1 with err naming the prompt.
static int prompt_encode(const Chat* chat, Tokenizer* tok, const PromptList* pl, int k, const char* name, int doc, int bos, int V, uint32_t** ids,
                         size_t* nids, size_t* icap, int* added, char* err, size_t errlen) {
    char where[600];
    if (pl->line[k] > 0) snprintf(where, sizeof(where), "%s:%lld", name, pl->line[k]);
    else snprintf(where, sizeof(where), "prompt %d", k + 1);
    *nids = 0;
    *added = 0;
    int rc = 0;
    if (chat) {
        ChatMsg one = {CHAT_USER, pl->text[k], pl->len[k], 0}, *m = &one;
        int n = 1, mcap = 0;
        Json j;
        memset(&j, 0, sizeof(j));
        char cerr[512];
        if (pl->msgs[k]) {  // {"messages": [...]}: parsed again (its strings live in j)
            m = NULL;
            n = 0;
            if (json_parse(&j, pl->text[k], pl->len[k], cerr, sizeof(cerr)) != 0) { json_free(&j); return st_err(err, errlen, "%s: %s", where, cerr); }
            rc = prompt_messages(&j, json_get(&j, 0, "messages"), "messages", 0, &m, &n, &mcap, name, pl->line[k], err, errlen);
        }
        ChatText work = {NULL, 0, 0};
        if (!rc && chat_encode_prompt(chat, tok, m, n, &work, ids, nids, icap, cerr, sizeof(cerr)) != 0) rc = st_err(err, errlen, "%s: %s", where, cerr);
        free(work.s);
        if (m != &one) free(m);
        json_free(&j);
        if (rc) return -1;
    } else {
        if (pl->msgs[k])
            return st_err(err, errlen, "%s: a \"messages\" list needs the model's chat template (-chat-prompt 0 sends text as it is)", where);
        if (tokenizer_encode(tok, (const unsigned char*)pl->text[k], pl->len[k], ids, nids, icap)) return st_err(err, errlen, "out of memory");
        if (doc >= 0 && !(*nids > 0 && ((int)(*ids)[0] == doc || (bos >= 0 && (int)(*ids)[0] == bos)))) {  // the document token first
            if (tokenizer_grow((void**)ids, icap, *nids + 1, sizeof(uint32_t)) != 0) return st_err(err, errlen, "out of memory");
            memmove(*ids + 1, *ids, sizeof(uint32_t) * *nids);
            (*ids)[0] = (uint32_t)doc;
            (*nids)++;
            *added = 1;
        }
    }
    for (size_t i = 0; i < *nids; i++)
        if ((*ids)[i] >= (uint32_t)V) return st_err(err, errlen, "%s encodes to token %u, outside the model's vocabulary (V = %d)", where, (unsigned)(*ids)[i], V);
    if (*nids == 0) return st_err(err, errlen, "%s: no tokens", where);
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
