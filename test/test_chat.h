// test/test_chat.h — conversations as fine-tuning data (chat.h, prompts.h): SHA-256 and the template
// table against the committed texts (test/fixtures/chat/), Jinja's trim and the date line, the
// renderings, ids and loss masks against transformers' apply_chat_template and `tokenizers`
// (dev/chat_fixtures.py), the cut rule and packing, and bad input.

#define CHAT_FIXTURES "test/fixtures/chat"

// SHA-256 against FIPS 180-4's examples, and every row of CHAT_TEMPLATES against its committed text.
TEST(chat_sha256_and_template_table) {
    static const struct { const char* in; const char* hex; } kat[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    };
    char hex[65];
    for (size_t i = 0; i < sizeof(kat) / sizeof(kat[0]); i++) {
        chat_sha256_hex(kat[i].in, strlen(kat[i].in), hex);
        CHECKF(!strcmp(hex, kat[i].hex), "sha256 of a %zu-byte message: %s", strlen(kat[i].in), hex);
    }
    char* million = (char*)malloc(1000000);
    memset(million, 'a', 1000000);
    chat_sha256_hex(million, 1000000, hex);
    CHECKF(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "sha256 of a million a: %s", hex);
    free(million);
    for (int i = 0; i < CHAT_NTEMPLATES; i++) {  // the table and the committed texts agree, one for one
        char path[256];
        snprintf(path, sizeof(path), "%s/%s.jinja", CHAT_FIXTURES, CHAT_TEMPLATES[i].name);
        size_t n = 0;
        unsigned char* t = tok_read_file(path, &n);
        CHECKF(t != NULL, "%s is missing", path);
        if (!t) continue;
        chat_sha256_hex(t, n, hex);
        CHECKF(!strcmp(hex, CHAT_TEMPLATES[i].sha256), "%s: sha256 %s, the table says %s", path, hex, CHAT_TEMPLATES[i].sha256);
        free(t);
    }
    char cmd[256], out[64];
    snprintf(cmd, sizeof(cmd), "ls %s/*.jinja | wc -l", CHAT_FIXTURES);
    test_run_cmd(cmd, out, sizeof(out));
    CHECKF(atoi(out) == CHAT_NTEMPLATES, "%s holds %d templates, the table %d", CHAT_FIXTURES, atoi(out), CHAT_NTEMPLATES);
}

// Jinja's trim is Python's str.strip(): str.isspace's characters at both ends, nothing else; the
// date line's "%d %b %Y" and -chat-date's checks.
TEST(chat_trim_and_date) {
    static const struct { const char* in; const char* out; } trim[] = {
        {"  a b  ", "a b"}, {"\t\n\v\f\r\x1c\x1d\x1e\x1f x \x1f", "x"}, {"\xc2\x85\xc2\xa0x\xc2\xa0", "x"},          // U+0085, U+00A0
        {"\xe3\x80\x80x\xe2\x80\x83\xe2\x80\xa8\xe2\x80\xa9", "x"},                                                  // U+3000, U+2003, U+2028, U+2029
        {"\xe2\x80\x8bx\xe2\x80\x8b", "\xe2\x80\x8bx\xe2\x80\x8b"},                                                 // U+200B is not space
        {"\xef\xbb\xbfx", "\xef\xbb\xbfx"}, {"x\xcc\x81 ", "x\xcc\x81"}, {"   ", ""}, {"", ""},                     // BOM stays; a mark stays
    };
    for (size_t i = 0; i < sizeof(trim) / sizeof(trim[0]); i++) {
        size_t a, b;
        chat_trim(trim[i].in, strlen(trim[i].in), &a, &b);
        CHECKF(b - a == strlen(trim[i].out) && !memcmp(trim[i].in + a, trim[i].out, b - a), "trim case %zu: [%zu, %zu)", i, a, b);
    }
    char d[32], err[256];
    CHECK(chat_date_string("2024-07-26", d, err, sizeof(err)) == 0 && !strcmp(d, "26 Jul 2024"));
    CHECK(chat_date_string("2026-02-03", d, err, sizeof(err)) == 0 && !strcmp(d, "03 Feb 2026"));
    CHECK(chat_date_string("2024-02-29", d, err, sizeof(err)) == 0 && !strcmp(d, "29 Feb 2024"));
    const char* bad[] = {"2023-02-29", "2024-13-01", "2024-00-10", "2024-7-26", "26 Jul 2024", "2024-07-26x", "1900-02-29"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECKF(chat_date_string(bad[i], d, err, sizeof(err)) != 0 && strstr(err, bad[i]), "-chat-date %s accepted (%s)", bad[i], d);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char want[32];
    strftime(want, sizeof(want), "%d %b %Y", &tm);  // the C locale: the test program never calls setlocale
    CHECKF(chat_date_string("", d, err, sizeof(err)) == 0 && !strcmp(d, want), "today: %s, strftime: %s", d, want);
}

#ifndef ENABLE_FP32 // (the tokenizer and the templates do not depend on the precision: the BF16 binary only)
// The messages of one JSONL line (either format) into *m; 0 when it parsed.
static int chat_test_line(Json* j, const char* line, ChatMsg** m, int* n, int* cap) {
    char err[512];
    *n = 0;
    if (json_parse(j, line, strlen(line), err, sizeof(err))) return -1;
    int fm = json_get(j, 0, "messages");
    if (fm >= 0) return prompt_messages(j, fm, "messages", 2, m, n, cap, "t", 1, err, sizeof(err));
    return prompt_messages(j, json_get(j, 0, "prompt"), "prompt", 0, m, n, cap, "t", 1, err, sizeof(err)) ||
           prompt_messages(j, json_get(j, 0, "completion"), "completion", 1, m, n, cap, "t", 1, err, sizeof(err));
}

// Walk the train shards of `prefix` (packed for T, document token D) and find the examples of
// `rows` (expected.json's list: ids, mask) in order: each right after a D, followed by a D, inside
// one sample, its mask exact, marked as its start (and no other token): the D before it, or with
// self_open (ChatML: the rendering does not start with D) its own first token. Returns the number found.
static int chat_test_walk(const char* prefix, int nshards, int T, uint32_t D, uint32_t V, const Json* e, int rows, int self_open) {
    int ex = 0, row = e->nodes[rows].first, bad_place = 0, bad_starts = 0;
    char err[512];
    for (int s = 0; s < nshards; s++) {
        char path[PATH_MAX + 16], mpath[PATH_MAX + 32];
        tokenize_shard_path(path, sizeof(path), prefix, "train", s);
        size_t nt = 0, nm = 0;
        DataLoader dl;
        CHECKF(dataloader_init(&dl, path, 1, T, (int)V, 0, 0, err, sizeof(err)) == 0 && dl.has_mask, "%s", err);
        const DataShard* sh = &dl.shards[0];
        snprintf(mpath, sizeof(mpath), "%s.mask", path);
        unsigned char* mf = tok_read_file(mpath, &nm);
        nt = (size_t)sh->ntok;
        CHECKF(mf && nm == SHARD_HEADER_BYTES + nt && (nt - 1) % (size_t)T == 0, "%s: %zu tokens, mask %zu bytes", path, nt, nm);
        if (!mf || nm != SHARD_HEADER_BYTES + nt) { free(mf); dataloader_free(&dl); return ex; }
        const uint8_t* mask = mf + SHARD_HEADER_BYTES;
        CHECKF(sh->tokens[0] == D && mask[0] == (self_open ? 0 : MASK_STARTS), "%s does not start with the document token%s", path,
               self_open ? " (opening nothing)" : " opening an example");
        size_t pos = 1;
        int starts = 0, ex0 = ex;
        for (size_t i = 0; i < nt; i++) starts += (mask[i] & MASK_STARTS) != 0;
        while (row >= 0) {
            while (pos < nt && sh->tokens[pos] == D && !(mask[pos] & MASK_COUNTS)) pos++; // padding, or the D after an example
            if (pos >= nt) break;
            int ids = json_get(e, row, "ids"), msk = json_get(e, row, "mask");
            size_t len = (size_t)e->nodes[ids].count, i = 0;
            int ok = pos + len < nt && sh->tokens[pos - 1] == D && sh->tokens[pos + len] == D && !(mask[pos + len] & MASK_COUNTS);
            bad_starts += ok && !(mask[self_open ? pos : pos - 1] & MASK_STARTS);
            int badm = 0;
            for (int a = e->nodes[ids].first, b = e->nodes[msk].first; ok && a >= 0; a = e->nodes[a].next, b = e->nodes[b].next, i++) {
                ok = sh->tokens[pos + i] == (uint32_t)e->nodes[a].i;
                badm += (mask[pos + i] & MASK_COUNTS) != (uint8_t)e->nodes[b].i || (i > 0 && (mask[pos + i] & MASK_STARTS));
            }
            CHECKF(ok, "%s: example %d not found at position %zu", path, ex, pos);
            CHECKF(badm == 0, "%s: example %d: %d mask bytes differ from the reference", path, ex, badm);
            if (!ok) { free(mf); dataloader_free(&dl); return ex; }
            size_t k = (pos - 1) / (size_t)T;  // the sample holding the D before it holds it all, and the D after it
            bad_place += pos + len > k * (size_t)T + (size_t)T;
            pos += len;
            ex++;
            row = e->nodes[row].next;
        }
        bad_starts += starts != ex - ex0;
        free(mf);
        dataloader_free(&dl);
    }
    CHECKF(bad_place == 0, "%d examples cross a sample boundary", bad_place);
    CHECKF(bad_starts == 0, "%d example starts wrong in the masks", bad_starts);
    return ex;
}

// For every template chat.h recognises: the C rendering of each conversation is byte-equal to
// apply_chat_template's (transformers >= 4.47 with jinja2, $ZT_HF_PYTHON), and -tokenize packs
// exactly `tokenizers`' ids of it with the mask on the assistant's tokens, cutting whole turns as
// the reference does; one run as a process (-chat-date, exit 0, the same shards).
TEST(chat_templates_vs_transformers) {
    const char* py = getenv("ZT_HF_PYTHON");
    if (!py || !*py) TEST_SKIP("needs $ZT_HF_PYTHON with transformers >= 4.47, jinja2 and tokenizers (.ci/run makes it)");
    char dir[PATH_MAX], cmd[2 * PATH_MAX], out[8192];
    snprintf(cmd, sizeof(cmd), "%s -c 'import sys' 2>/dev/null", py);
    if (test_run_cmd(cmd, NULL, 0) != 0) TEST_SKIP("$ZT_HF_PYTHON does not run (a missing interpreter)");
    snprintf(dir, sizeof(dir), "%s/chat", test_tmpdir());
    const int T = 160;
    snprintf(cmd, sizeof(cmd), "TZ=UTC %s dev/chat_fixtures.py --out %s --T %d --date 2026-02-03 2>&1", py, dir, T);
    int rc = test_run_cmd(cmd, out, sizeof(out));
    if (rc == 3) TEST_SKIP("$ZT_HF_PYTHON lacks transformers >= 4.47, jinja2 or tokenizers");
    CHECKF(rc == 0, "dev/chat_fixtures.py failed:\n%s", out);
    if (rc != 0) return;
    printf("%s", out);
    char err[1024];
    for (int t = 0; t < CHAT_NTEMPLATES; t++) {
        const char* name = CHAT_TEMPLATES[t].name;
        char tdir[PATH_MAX + 64], jsonl[PATH_MAX + 64], epath[PATH_MAX + 64], prefix[PATH_MAX + 64];
        snprintf(tdir, sizeof(tdir), "%s/%s", dir, name);
        snprintf(jsonl, sizeof(jsonl), "%s/conversations.jsonl", tdir);  // the lines it renders
        snprintf(epath, sizeof(epath), "%s/expected.json", tdir);
        snprintf(prefix, sizeof(prefix), "%s/packed", tdir);
        Tokenizer tok;
        CHECKF(tokenizer_init(&tok, tdir, err, sizeof(err)) == 0, "%s", err);
        if (!tok.hf) continue;
        Chat chat;
        CHECKF(chat_init(&chat, &tok, "2026-02-03", err, sizeof(err)) == 0 && chat.t == &CHAT_TEMPLATES[t], "%s: %s", name, err);
        size_t elen = 0, llen = 0;
        char* etext = (char*)tok_read_file(epath, &elen);
        char* lines = (char*)tok_read_file(jsonl, &llen);
        Json e;
        CHECKF(etext && lines && json_parse(&e, etext, elen, err, sizeof(err)) == 0, "%s: %s", epath, err);
        if (!etext || !lines) { free(etext); free(lines); tokenizer_free(&tok); continue; }
        lines[llen] = 0;
        // 1. the renderings, byte for byte (and, for Llama 3.1/3.2, with the template's own date)
        ChatMsg* m = NULL;
        int nm = 0, mcap = 0, row = e.nodes[0].first, nrend = 0;
        ChatText txt = {NULL, 0, 0};
        for (char* line = strtok(lines, "\n"); line && row >= 0; line = strtok(NULL, "\n"), row = e.nodes[row].next) {
            Json j;
            CHECKF(chat_test_line(&j, line, &m, &nm, &mcap) == 0, "%s: a line did not parse", name);
            size_t(*spans)[2] = (size_t(*)[2])malloc(sizeof(*spans) * (size_t)(nm + 1));
            for (int pass = 0; pass < 2; pass++) {
                int want = json_get(&e, row, pass ? "rendered_default" : "rendered");
                if (want < 0) { CHECKF(pass == 1 && !chat.t->default_date, "%s: no rendering", name); continue; }
                Chat c2 = chat;
                if (pass) chat_init(&c2, &tok, "", err, sizeof(err));
                const char* theirs = strstr(e.nodes[want].str, "Today Date: ");  // python's today (TZ=UTC), taken a moment before ours
                if (pass && theirs && strncmp(theirs + 12, c2.date, strlen(c2.date))) { printf("    (the day changed between the reference and us: not compared)\n"); continue; }
                CHECKF(chat_render(&c2, m, nm, 0, &txt, spans, err, sizeof(err)) == 0, "%s, conversation %d: %s", name, nrend, err);
                const JsonNode* w = &e.nodes[want];
                size_t at = 0;
                while (at < txt.n && at < (size_t)w->len && txt.s[at] == w->str[at]) at++;
                CHECKF(txt.n == (size_t)w->len && at == txt.n, "%s, conversation %d%s: renderings differ at byte %zu (ours %zu bytes, transformers %lld):\n"
                       "      ours: ...%.60s\n      theirs: ...%.60s", name, nrend, pass ? " (the template's date)" : "", at, txt.n, (long long)w->len,
                       txt.s + (at > 20 ? at - 20 : 0), w->str + (at > 20 ? at - 20 : 0));
            }
            // -prompt's rendering: without the closing assistant messages, with the generation prompt
            int np = nm;
            while (np > 0 && m[np - 1].role == CHAT_ASSISTANT) np--;
            int pr = json_get(&e, row, "prompt_rendered"), pi = json_get(&e, row, "prompt_ids");
            uint32_t* pids = NULL;
            size_t npids = 0, pcap = 0;
            CHECKF(pr >= 0 && pi >= 0 && chat_encode_prompt(&chat, &tok, m, np, &txt, &pids, &npids, &pcap, err, sizeof(err)) == 0, "%s: %s", name, err);
            if (pr >= 0 && pi >= 0) {
                int same = npids == (size_t)e.nodes[pi].count;
                for (int x = e.nodes[pi].first, i = 0; same && x >= 0; x = e.nodes[x].next, i++) same = e.nodes[x].i == (int64_t)pids[i];
                CHECKF(txt.n == (size_t)e.nodes[pr].len && !memcmp(txt.s, e.nodes[pr].str, txt.n) && same,
                       "%s, conversation %d: the prompt's rendering (%zu bytes, %zu ids) differs from apply_chat_template(add_generation_prompt=True) "
                       "(%lld bytes, %d ids):\n      ours: %s\n    theirs: %s", name, nrend, txt.n, npids, (long long)e.nodes[pr].len, e.nodes[pi].count, txt.s,
                       e.nodes[pr].str);
            }
            free(pids);
            free(spans);
            json_free(&j);
            nrend++;
        }
        CHECKF(nrend == e.nodes[0].count, "%s: %d conversations rendered, %d expected", name, nrend, e.nodes[0].count);
        // 1b. the conversations the template refuses (Mistral's raise_exception): refused, in its words
        char rpath[PATH_MAX + 64];
        snprintf(rpath, sizeof(rpath), "%s/refused.json", tdir);
        size_t rlen = 0;
        char* rtext = (char*)tok_read_file(rpath, &rlen);
        Json r;
        int nref = 0;
        CHECKF(rtext && json_parse(&r, rtext, rlen, err, sizeof(err)) == 0, "%s: %s", rpath, err);
        for (int x = rtext ? r.nodes[0].first : -1; x >= 0; x = r.nodes[x].next, nref++) {
            int ln = json_get(&r, x, "line"), er = json_get(&r, x, "error"), fm = json_get(&r, ln, "messages");
            nm = 0;
            int bad = fm >= 0 ? prompt_messages(&r, fm, "messages", 2, &m, &nm, &mcap, "t", 1, err, sizeof(err))
                              : prompt_messages(&r, json_get(&r, ln, "prompt"), "prompt", 0, &m, &nm, &mcap, "t", 1, err, sizeof(err)) ||
                                prompt_messages(&r, json_get(&r, ln, "completion"), "completion", 1, &m, &nm, &mcap, "t", 1, err, sizeof(err));
            size_t(*spans)[2] = (size_t(*)[2])malloc(sizeof(*spans) * (size_t)(nm + 1));
            err[0] = 0;
            CHECKF(!bad && chat_render(&chat, m, nm, 0, &txt, spans, err, sizeof(err)) != 0 && strstr(err, r.nodes[er].str),
                   "%s: a conversation transformers refuses (\"%s\") is not refused so: %s", name, r.nodes[er].str, err);
            if (nref == 0) printf("    %s refuses: %s\n", name, err);
            free(spans);
        }
        if (rtext) json_free(&r);
        free(rtext);
        // 2. -tokenize: ids, masks, cuts, packing
        PromptStats st;
        rc = tokenize_prompts_to_shards(&tok, jsonl, prefix, T, 0, 3 * T + 1, "2026-02-03", &st, err, sizeof(err));
        CHECKF(rc == 0, "%s: %s", name, err);
        int cuts = 0;
        for (int r = e.nodes[0].first; r >= 0; r = e.nodes[r].next) cuts += e.nodes[json_get(&e, r, "cut")].type == JSON_TRUE;
        CHECKF(rc == 0 && st.cut == cuts && !strcmp(st.chat_template, name), "%s: %lld cut (reference %d), template %s", name, (long long)st.cut, cuts, st.chat_template);
        uint32_t D = (uint32_t)tok.eot_token;
        int found = rc == 0 ? chat_test_walk(prefix, st.shards[0], T, D, tok.vocab_size, &e, 0, !chat_writes_bos(chat.t->family)) : 0;
        CHECKF(found == e.nodes[0].count, "%s: %d of %d examples found in %d shards", name, found, e.nodes[0].count, st.shards[0]);
        printf("    %s: %d renderings (and as prompts, with the generation prompt) equal to transformers, %d refused as it refuses them; %d examples, ids "
               "and masks equal to the reference, %lld cut, %d shards at T = %d\n", name, nrend, nref, found, (long long)st.cut, st.shards[0], T);
        // 3. once as the trainer runs it: exit 0, the template and date said, the same shards
        if (!strcmp(name, "llama3.2")) {
            char cprefix[PATH_MAX + 64], flags[4 * PATH_MAX];
            snprintf(cprefix, sizeof(cprefix), "%s/cli", tdir);
            snprintf(flags, sizeof(flags), "-tokenize %s -tokenizer %s -o %s -t %d -val-every 0 -shard-tokens %d -chat-date 2026-02-03", jsonl, tdir,
                     cprefix, T, 3 * T + 1);
            rc = cli_run(flags, out, sizeof(out));
            CHECKF(rc == 0 && strstr(out, "chat template: llama3.2, date line 03 Feb 2026"), "rc %d:\n%s", rc, out);
            for (int s = 0; s < st.shards[0]; s++) {
                char a[PATH_MAX + 128], b[PATH_MAX + 128];
                tokenize_shard_path(a, sizeof(a), prefix, "train", s);
                tokenize_shard_path(b, sizeof(b), cprefix, "train", s);
                snprintf(cmd, sizeof(cmd), "cmp -s %s %s && cmp -s %s.mask %s.mask", a, b, a, b);
                CHECKF(test_run_cmd(cmd, NULL, 0) == 0, "shard %d differs between the process and the function", s);
            }
        }
        free(txt.s);
        free(m);
        json_free(&e);
        free(etext);
        free(lines);
        tokenizer_free(&tok);
    }
}

#endif

// A small tokenizer written by hand (bytes, "ab", "abc", <|endoftext|> and the special tokens of
// ChatML and Llama 3) in dir, with tokenizer_config.json = {EXTRA "chat_template": tmpl} (JSON-escaped
// here), or, when jinja is 1, {EXTRA} and the template in chat_template.jinja.
static void chat_test_tokenizer(const char* dir, const char* tmpl, size_t tlen, int jinja, const char* extra) {
    char p[PATH_MAX + 64];
    mkdir(dir, 0755);
    static const char* const specials[] = {"<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                           "<s>", "</s>"};
    char added[2048] = "\"special\": true}";
    for (int i = 0; i < 8; i++)
        snprintf(added + strlen(added), sizeof(added) - strlen(added), ", {\"id\": %d, \"content\": \"%s\", \"single_word\": false, \"lstrip\": false, "
                 "\"rstrip\": false, \"normalized\": false, \"special\": true}", 259 + i, specials[i]);
    strcat(added, "]");
    const char* from[1] = {"\"special\": true}]"};
    const char* to[1] = {added};
    char* js = tok_hf_json(from, to, 1);
    snprintf(p, sizeof(p), "%s/tokenizer.json", dir);
    tok_write_file(p, js, strlen(js));
    free(js);
    size_t cap = 6 * tlen + 256 + strlen(extra), n = 0;
    char* cfg = (char*)malloc(cap);
    n += (size_t)snprintf(cfg, cap, "{%s%s", extra, jinja ? "}" : "\"chat_template\": \"");
    for (size_t i = 0; i < tlen && !jinja; i++) {
        unsigned char c = (unsigned char)tmpl[i];
        if (c == '"' || c == '\\') n += (size_t)snprintf(cfg + n, cap - n, "\\%c", c);
        else if (c < 0x20) n += (size_t)snprintf(cfg + n, cap - n, "\\u%04x", c);
        else cfg[n++] = (char)c;
    }
    if (!jinja) n += (size_t)snprintf(cfg + n, cap - n, "\"}");
    snprintf(p, sizeof(p), "%s/tokenizer_config.json", dir);
    tok_write_file(p, cfg, n);
    free(cfg);
    snprintf(p, sizeof(p), "%s/chat_template.jinja", dir);
    if (jinja) tok_write_file(p, tmpl, tlen);
    else remove(p);
}

// Bad input: exit 2 (in the trainer) with a message naming the file and the line, nothing written.
// Needs no Python: a hand-made tokenizer with the SmolLM2 template.
TEST(chat_bad_input) {
    char dir[PATH_MAX], in[PATH_MAX + 16], prefix[PATH_MAX + 16], err[1024];
    snprintf(dir, sizeof(dir), "%s/chat_bad_tok", test_tmpdir());
    snprintf(in, sizeof(in), "%s/chat_bad.jsonl", test_tmpdir());
    snprintf(prefix, sizeof(prefix), "%s/chatbad", test_tmpdir());
    size_t tlen = 0;
    char* tmpl = (char*)tok_read_file(CHAT_FIXTURES "/smollm2.jinja", &tlen);
    CHECK(tmpl != NULL);
    if (!tmpl) return;
    chat_test_tokenizer(dir, tmpl, tlen, 0, "\"eos_token\": \"<|im_end|>\", ");
    Tokenizer tok;
    CHECKF(tokenizer_init(&tok, dir, err, sizeof(err)) == 0, "%s", err);
    if (!tok.hf) { free(tmpl); return; }
    const char* ok = "{\"messages\": [{\"role\": \"user\", \"content\": \"ab\"}, {\"role\": \"assistant\", \"content\": \"abc\"}]}\n";
    static const struct { const char* line; const char* expect; } bad[] = {
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\" \"content\": \"b\"}]}", ":2: JSON"},
        {"{\"messages\": [{\"role\": \"robot\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}", ":2: messages[0]: unknown role \"robot\""},
        {"{\"messages\": [{\"role\": \"tool\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}", ":2: messages[0]: unknown role \"tool\""},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\"}]}", ":2: messages[1] has no \"content\""},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": 7}]}", ":2: messages[1]: \"content\" is not a string"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": [{\"type\": \"text\"}]}]}", ":2: messages[1]: \"content\" is not a string"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"content\": \"b\"}]}", ":2: messages[1] has no string \"role\""},
        {"{\"messages\": [\"a\"]}", ":2: messages[0] is not a message object"},
        {"{\"messages\": []}", ":2: \"messages\" is an empty list"},
        {"{\"messages\": {\"role\": \"user\"}}", ":2: \"messages\" is not a list of messages"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}", ":2: the last message is the user's"},
        {"{\"prompt\": [{\"role\": \"user\", \"content\": \"a\"}], \"completion\": [{\"role\": \"user\", \"content\": \"b\"}]}", ":2: completion[0] is a \"user\" message"},
        {"{\"prompt\": \"a\", \"completion\": \"b\"}", ":2: prompt/completion strings, but the lines before are conversations"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\", \"tool_calls\": []}]}", ":2: messages[1]: tool calls"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\", \"reasoning_content\": \"r\"}]}",
         ":2: messages[1]: a separate \"reasoning_content\""},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"%s\"}]}",
         ":2: the conversation's last turn (2 message(s) from its last user message on) is"},
    };
    const int T = 128;
    char longline[1024];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char bprefix[PATH_MAX + 32], cmd[2 * PATH_MAX], got[64];
        snprintf(bprefix, sizeof(bprefix), "%s%zu", prefix, i);
        FILE* f = fopen(in, "w");
        snprintf(longline, sizeof(longline), bad[i].line, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
        fprintf(f, "%s%s\n", ok, longline);
        fclose(f);
        PromptStats st;
        int rc = tokenize_prompts_to_shards(&tok, in, bprefix, T, 0, 4 * T + 1, "", &st, err, sizeof(err));
        snprintf(cmd, sizeof(cmd), "ls %s* 2>/dev/null | wc -l", bprefix);
        test_run_cmd(cmd, got, sizeof(got));
        CHECKF(rc != 0 && strstr(err, in) && strstr(err, bad[i].expect) && atoi(got) == 0, "bad case %zu: rc %d, '%s' (want '%s'), %d files left", i, rc, err,
               bad[i].expect, atoi(got));
    }
    // the first line of a file of good ones that fits is packed; the cut keeps the system prompt
    FILE* f = fopen(in, "w");
    fprintf(f, "%s{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"%s\"}, "
               "{\"role\": \"assistant\", \"content\": \"x\"}, {\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"y\"}]}\n", ok,
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    fclose(f);
    PromptStats st;
    int rc = tokenize_prompts_to_shards(&tok, in, prefix, T, 0, 4 * T + 1, "", &st, err, sizeof(err));
    CHECKF(rc == 0 && st.examples[0] == 2 && st.cut == 1, "rc %d (%s), %lld examples, %lld cut", rc, err, (long long)st.examples[0], (long long)st.cut);
    // chat_template.jinja beside the config is the template (transformers >= 4.50 reads it first)
    char dir2[PATH_MAX + 16];
    snprintf(dir2, sizeof(dir2), "%s2", dir);
    chat_test_tokenizer(dir2, tmpl, tlen, 1, "");
    Tokenizer tok2;
    CHECKF(tokenizer_init(&tok2, dir2, err, sizeof(err)) == 0, "%s", err);
    rc = tok2.hf ? tokenize_prompts_to_shards(&tok2, in, prefix, T, 0, 4 * T + 1, "", &st, err, sizeof(err)) : -1;
    CHECKF(rc == 0 && !strcmp(st.chat_template, "smollm2"), "chat_template.jinja: %s", err);
    tokenizer_free(&tok2);
    // the template's text changed by one byte (in either place): refused, naming the file and the new hash
    tmpl[tlen - 1] = ' ';
    char hex[65];
    chat_sha256_hex(tmpl, tlen, hex);
    for (int jinja = 0; jinja < 2; jinja++) {
        chat_test_tokenizer(dir2, tmpl, tlen, jinja, "");
        CHECKF(tokenizer_init(&tok2, dir2, err, sizeof(err)) == 0, "%s", err);
        rc = tok2.hf ? tokenize_prompts_to_shards(&tok2, in, prefix, T, 0, 4 * T + 1, "", &st, err, sizeof(err)) : -1;
        CHECKF(rc != 0 && strstr(err, jinja ? "chat_template.jinja" : "tokenizer_config.json") && strstr(err, hex) && strstr(err, "not one this build renders"),
               "%s", err);
        tokenizer_free(&tok2);
    }
    // Llama 3.1's template writes bos_token first: from tokenizer_config.json, else special_tokens_map.json, else refused
    size_t llen = 0;
    char* ltmpl = (char*)tok_read_file(CHAT_FIXTURES "/llama3.1.jinja", &llen);
    CHECK(ltmpl != NULL);
    for (int k = 0; ltmpl && k < 3; k++) {
        chat_test_tokenizer(dir2, ltmpl, llen, 0, k == 0 ? "\"bos_token\": {\"content\": \"<|begin_of_text|>\"}, " : "");
        char p[PATH_MAX + 64];
        snprintf(p, sizeof(p), "%s/special_tokens_map.json", dir2);
        if (k == 1) tok_write_file(p, "{\"bos_token\": \"<|begin_of_text|>\"}", strlen("{\"bos_token\": \"<|begin_of_text|>\"}"));
        else remove(p);
        CHECKF(tokenizer_init(&tok2, dir2, err, sizeof(err)) == 0, "%s", err);
        rc = tok2.hf ? tokenize_prompts_to_shards(&tok2, in, prefix, T, 0, 4 * T + 1, "", &st, err, sizeof(err)) : -1;
        if (k < 2) CHECKF(rc == 0 && !strcmp(st.chat_template, "llama3.1") && !strcmp(st.chat_date, "26 Jul 2024"), "bos case %d: %s", k, err);
        else CHECKF(rc != 0 && strstr(err, "writes bos_token first") && strstr(err, "special_tokens_map.json"), "%s", err);
        tokenizer_free(&tok2);
    }
    free(ltmpl);
    // Mistral's first template refuses a system message (its raise_exception): the line and its words, nothing written
    char* mtmpl = (char*)tok_read_file(CHAT_FIXTURES "/mistral.jinja", &llen);
    CHECK(mtmpl != NULL);
    if (mtmpl) {
        chat_test_tokenizer(dir2, mtmpl, llen, 0, "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", ");
        CHECKF(tokenizer_init(&tok2, dir2, err, sizeof(err)) == 0, "%s", err);
        f = fopen(in, "w");
        fprintf(f, "%s{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"a\"}, "
                   "{\"role\": \"assistant\", \"content\": \"b\"}]}\n", ok);
        fclose(f);
        char mprefix[PATH_MAX + 32], cmd[2 * PATH_MAX], got[64];
        snprintf(mprefix, sizeof(mprefix), "%s_mistral", prefix);
        rc = tok2.hf ? tokenize_prompts_to_shards(&tok2, in, mprefix, T, 0, 4 * T + 1, "", &st, err, sizeof(err)) : 0;
        snprintf(cmd, sizeof(cmd), "ls %s* 2>/dev/null | wc -l", mprefix);
        test_run_cmd(cmd, got, sizeof(got));
        CHECKF(rc != 0 && strstr(err, in) && strstr(err, ":2: the mistral chat template refuses the conversation (message 1 is the system's)") &&
               strstr(err, "Conversation roles must alternate user/assistant/user/assistant/...") && atoi(got) == 0, "%s (%d files)", err, atoi(got));
        tokenizer_free(&tok2);
    }
    free(mtmpl);
    // llm.c's GPT-2 file cannot render conversations
    Tokenizer* g = tok_gpt2();
    rc = g ? tokenize_prompts_to_shards(g, in, prefix, T, 0, 4 * T + 1, "", &st, err, sizeof(err)) : -1;
    CHECKF(rc != 0 && strstr(err, "llm.c's GPT-2 file"), "%s", err);
#ifndef ENABLE_FP32 // (processes: the BF16 binary only)
    // as the trainer: exit 2, the file and line named; a bad -chat-date is exit 2 before anything
    f = fopen(in, "w");
    fprintf(f, "%s%s\n", ok, bad[1].line);
    fclose(f);
    char flags[3 * PATH_MAX], out[4096];
    snprintf(flags, sizeof(flags), "-tokenize %s -tokenizer %s -o %s -t %d", in, dir, prefix, T);
    rc = cli_run(flags, out, sizeof(out));
    CHECKF(rc == 2 && strstr(out, in) && strstr(out, ":2: messages[0]: unknown role"), "rc %d:\n%s", rc, out);
    snprintf(flags, sizeof(flags), "-tokenize %s -tokenizer %s -o %s -t %d -chat-date 2024-02-30", in, dir, prefix, T);
    rc = cli_run(flags, out, sizeof(out));
    CHECKF(rc == 2 && strstr(out, "-chat-date 2024-02-30: no such date"), "rc %d:\n%s", rc, out);
#endif
    tokenizer_free(&tok);
    free(tmpl);
}

#ifdef ENABLE_FP32 // (processes, in FP32: transformers' F32 generate makes the same greedy choices)
static size_t chat_unhex(const char* hex, char* out, size_t cap) {
    size_t n = 0;
    for (; hex[0] && hex[1] && n + 1 < cap; hex += 2) {
        unsigned v;
        if (sscanf(hex, "%2x", &v) != 1) break;
        out[n++] = (char)v;
    }
    out[n] = 0;
    return n;
}

// -prompt on tiny random models beside the Llama 3.2 and Qwen2.5 fixture tokenizers (dev/chat_fixtures.py
// --models): for four prompts each — a text and a "messages" list through the chat template
// (-chat-prompt auto), apply_chat_template's rendering given as text (-chat-prompt 0: its BOS taken, none
// added) and a plain text (after the document token) — the printed prompt and the greedy reply equal
// transformers' generate on the same ids, stopping where it stops (generation_config.json's
// eos_token_id, the template's end of turn, the document token) or after -g.
TEST(chat_prompt_vs_generate) {
    const char* py = getenv("ZT_HF_PYTHON");
    if (!py || !*py) TEST_SKIP("needs $ZT_HF_PYTHON with transformers >= 4.47, jinja2, tokenizers and torch (.ci/run makes it)");
    char dir[PATH_MAX], cmd[4 * PATH_MAX], err[512];
    static char out[65536];
    snprintf(cmd, sizeof(cmd), "%s -c 'import torch' 2>/dev/null", py);
    if (test_run_cmd(cmd, NULL, 0) != 0) TEST_SKIP("$ZT_HF_PYTHON does not import torch");
    snprintf(dir, sizeof(dir), "%s/chat_gen", test_tmpdir());
    snprintf(cmd, sizeof(cmd), "TZ=UTC %s dev/chat_fixtures.py --out %s --models --gen 12 --date 2026-02-03 2>&1", py, dir);
    int rc = test_run_cmd(cmd, out, sizeof(out));
    if (rc == 3) TEST_SKIP("$ZT_HF_PYTHON lacks transformers >= 4.47, jinja2 or tokenizers");
    CHECKF(rc == 0, "dev/chat_fixtures.py --models failed:\n%s", out);
    if (rc != 0) return;
    char shard[PATH_MAX + 16];
    snprintf(shard, sizeof(shard), "%s/toks.bin", dir); // (-x 0 trains nothing; the loader still opens -i)
    uint16_t toks[600];
    for (int i = 0; i < 600; i++) toks[i] = (uint16_t)(i * 7 % 500);
    CHECK(write_token_shard(shard, toks, 600, err, sizeof(err)) == 0);
    const char* names[2] = {"llama3.2", "qwen2.5"};
    for (int t = 0; t < 2; t++) {
        char gpath[PATH_MAX + 64];
        snprintf(gpath, sizeof(gpath), "%s/%s/generate.json", dir, names[t]);
        size_t glen = 0;
        char* gtext = (char*)tok_read_file(gpath, &glen);
        Json g;
        CHECKF(gtext && json_parse(&g, gtext, glen, err, sizeof(err)) == 0 && g.nodes[0].count == 4, "%s: %s", gpath, err);
        if (!gtext) continue;
        int c = g.nodes[0].first;
        for (int mode = 0; mode < 2; mode++) {
            char exp[PATH_MAX + 64] = "";  // (once: the export beside the samples, over a stale chat_template.jinja)
            if (t == 0 && mode == 1) {
                snprintf(exp, sizeof(exp), "-export-hf %s/exported", dir);
                char stale[PATH_MAX + 64];
                snprintf(stale, sizeof(stale), "mkdir -p %s/exported && echo stale > %s/exported/chat_template.jinja", dir, dir);
                CHECK(test_run_cmd(stale, NULL, 0) == 0);
            }
            snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train -device cpu -e %s/%s -i %s -j '' -x 0 -v 0 -s 0 -b 1 -t 128 -g 12 -temperature 0 "
                     "-chat-date 2026-02-03 -chat-prompt %s -prompt @%s/%s/prompts_%s.jsonl %s", g_test_self, dir, names[t], shard, mode ? "0" : "auto",
                     dir, names[t], mode ? "text" : "chat", exp);
            rc = test_run_cmd(cmd, out, sizeof(out));
            CHECKF(rc == 0, "%s: exit %d:\n%s", cmd, rc, out);
            CHECKF(mode || strstr(out, "-prompt: each prompt the user's message"), "%s: -chat-prompt auto did not take the template:\n%s", names[t], out);
            if (exp[0]) { // the export: the source's generation_config.json and tokenizer files, byte for byte
                char cmp[4 * PATH_MAX];
                snprintf(cmp, sizeof(cmp), "cd %s && for f in generation_config.json tokenizer.json tokenizer_config.json; do cmp $f ../exported/$f || exit 1; done "
                         "&& test ! -e ../exported/chat_template.jinja", names[t]);
                char full[5 * PATH_MAX];
                snprintf(full, sizeof(full), "cd %s && %s", dir, cmp);
                char cout[2048];
                CHECKF(test_run_cmd(full, cout, sizeof(cout)) == 0, "-export-hf: the source's files not copied:\n%s", cout);
            }
            for (int k = 0; k < 2 && c >= 0; k++, c = g.nodes[c].next) {
                static char want[3][4096];
                const char* key[3] = {"prompt", "reply", "end"};
                for (int q = 0; q < 3; q++) chat_unhex(g.nodes[json_get(&g, c, key[q])].str, want[q], sizeof(want[q]));
                char head[64];
                snprintf(head, sizeof(head), "prompt %d", k + 1);
                const char* h = strstr(out, head);
                const char* p = h ? strstr(h, "--- prompt\n") : NULL;
                const char* r = p ? strstr(p, "\n--- reply\n") : NULL;
                const char* e = r ? strstr(r, "\n--- end: ") : NULL;
                const char* nl = e ? strchr(e + 10, '\n') : NULL;
                int ok = nl && (size_t)(r - p - 11) == strlen(want[0]) && !memcmp(p + 11, want[0], strlen(want[0])) &&
                         (size_t)(e - r - 11) == strlen(want[1]) && !memcmp(r + 11, want[1], strlen(want[1])) &&
                         (size_t)(nl - e - 10) == strlen(want[2]) && !memcmp(e + 10, want[2], strlen(want[2]));
                CHECKF(ok, "%s, -chat-prompt %s, prompt %d: not transformers' greedy generate\n  expected prompt: %s\n  reply: %s\n  end: %s\nours:\n%s",
                       names[t], mode ? "0" : "auto", k + 1, want[0], want[1], want[2], h ? h : out);
            }
        }
        json_free(&g);
        free(gtext);
    }
    // a template that cannot be rendered as asked (here a -chat-date that is no date) ends the run under auto too
    snprintf(cmd, sizeof(cmd), "%s --train -device cpu -e %s/llama3.2 -i %s -j '' -x 0 -v 0 -s 0 -b 1 -t 128 -g 2 -chat-date 2026-02-30 -prompt hi",
             g_test_self, dir, shard);
    rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 2 && strstr(out, "-chat-date 2026-02-30"), "a bad -chat-date under -chat-prompt auto: exit %d\n%s", rc, out);
    if (!g_test_failed) printf("    Llama 3.2 and Qwen2.5 shapes: 8 prompts (template text and messages, rendered text, plain text): prompt and greedy reply equal to transformers' generate\n");
}
#endif
