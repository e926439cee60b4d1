// test/test_resume.h — issue 26: a checkpoint knows its run (the run's flags recorded, taken on
// -y 1 when not given, a changed one refused unless -resume-change names it), reading is not
// resuming (-x 0 -export... changes nothing in -o), a roll-back is a transaction (a failed one
// leaves the directory as it found it; dropped log lines go to the set-aside folder), the walk-
// through of a first fine-tune (a JSONL, killed, resumed with -o DIR -y 1, an older checkpoint
// exported), masks read with pread, -prompt's files (@DIR, pipes, .jsonl) and the sampling rule,
// and the messages the campaign found untrue or missing. Processes: test_bf16 only.

// sample_token: greedy, top-k, and temperature 1 / top-k 0 is the softmax's inverse CDF in index
// order (the rule samples had before the flags existed, with u = 0 no longer drawing a token of
// weight ~0: the first token whose cumulative weight exceeds u * sum).
TEST(prompt_sample_token_rule) {
    const int V = 7;
    float lg[V] = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f, -3.0f, 0.0f}, scratch[V];
    unsigned char keep[V];
    for (int i = 0; i <= 20; i++) {
        double u = i / 20.0 * 0.999999;
        CHECKF(sample_token(lg, V, 0.0f, 0, u, scratch, keep) == 1, "greedy: the largest, the lowest index on a tie");
        CHECKF(sample_token(lg, V, 1.0f, 1, u, scratch, keep) == 1, "top-k 1 is greedy");
        int t2 = sample_token(lg, V, 1.0f, 2, u, scratch, keep), t3 = sample_token(lg, V, 0.7f, 3, u, scratch, keep);
        CHECKF(t2 == 1 || t2 == 3, "top-k 2 drew %d", t2);
        CHECKF(t3 == 1 || t3 == 3 || t3 == 4, "top-k 3 drew %d", t3);
        double maxv = 2.0, sum = 0.0, cdf = 0.0; // the old rule, written out
        for (int j = 0; j < V; j++) sum += exp((double)lg[j] - maxv);
        int want = V - 1;
        for (int j = 0; j < V; j++) { cdf += exp((double)lg[j] - maxv); if (u * sum < cdf) { want = j; break; } }
        CHECKF(sample_token(lg, V, 1.0f, 0, u, scratch, keep) == want, "u %g: temperature 1 drew another token than the softmax's CDF", u);
    }
    int hot = 0; // a high temperature flattens: the smallest logit is drawn for some u; a low one never leaves the top
    for (int i = 0; i < 1000; i++) hot += sample_token(lg, V, 100.0f, 0, i / 1000.0, scratch, keep) == 5;
    CHECKF(hot > 50, "temperature 100: token 5 drawn %d times in 1000", hot);
    for (int i = 0; i < 1000; i++) { int t = sample_token(lg, V, 0.01f, 0, (i + 0.5) / 1000.0, scratch, keep); CHECKF(t == 1 || t == 3, "temperature 0.01 drew %d", t); }
}

// prompt_split: plain lines; a .jsonl of JSON strings (a prompt with a newline) or {"prompt": ...};
// a bad line named; prompt_file_read on a directory is an error, not a crash.
TEST(prompt_split_and_read) {
    PromptList pl;
    char err[512];
    const char* plain = "first\r\n\n  \nsecond line\n";
    CHECK(prompt_split("p.txt", plain, strlen(plain), 0, &pl, err, sizeof(err)) == 0 && pl.n == 2 && !strcmp(pl.text[0], "first") && !strcmp(pl.text[1], "second line"));
    prompt_list_free(&pl);
    const char* js = "\"Q: one\\nA:\"\n\n{\"prompt\": \"two\", \"completion\": \"x\"}\n";
    CHECK(prompt_split("p.jsonl", js, strlen(js), 1, &pl, err, sizeof(err)) == 0 && pl.n == 2 && !strcmp(pl.text[0], "Q: one\nA:") && !strcmp(pl.text[1], "two"));
    prompt_list_free(&pl);
    const char* jm = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n\"text\"\n";  // a conversation so far: kept whole for prompt_encode
    CHECK(prompt_split("p.jsonl", jm, strlen(jm), 1, &pl, err, sizeof(err)) == 0 && pl.n == 2 && pl.msgs[0] == 1 && pl.msgs[1] == 0 &&
          pl.line[1] == 2 && !strcmp(pl.text[1], "text") && !strncmp(pl.text[0], "{\"messages\"", 11));
    prompt_list_free(&pl);
    const char* bad = "\"ok\"\n[1]\n";
    CHECKF(prompt_split("p.jsonl", bad, strlen(bad), 1, &pl, err, sizeof(err)) != 0 && strstr(err, "p.jsonl:2: not a JSON string"), "%s", err);
    char* text;
    size_t len;
    CHECKF(prompt_file_read(test_tmpdir(), &text, &len, err, sizeof(err)) != 0 && strstr(err, "is a directory"), "%s", err);
}

// Loss masks are read like token shards: pread for every batch, checked every time. A mask byte
// rewritten to 7 mid-run, or a mask truncated mid-run, is an error naming the mask (not accepted
// into the loss, not a SIGBUS); an all-zero mask is refused at start-up.
TEST(ft_mask_pread_checks) {
    char path[PATH_MAX], mpath[PATH_MAX + 8], err[512];
    snprintf(path, sizeof(path), "%s/mask_mid_run.bin", test_tmpdir());
    snprintf(mpath, sizeof(mpath), "%s.mask", path);
    uint16_t toks[200];
    uint8_t mask[200];
    for (int i = 0; i < 200; i++) { toks[i] = (uint16_t)(i * 7 % 1000); mask[i] = (uint8_t)(i % 3 != 0); }
    CHECK(write_token_shard(path, toks, 200, err, sizeof(err)) == 0 && write_mask_file(mpath, mask, 200, 8, 1, err, sizeof(err)) == 0);
    DataLoader dl;
    CHECKF(dataloader_init(&dl, path, 2, 8, 1000, 0, 0, err, sizeof(err)) == 0 && dl.has_mask, "%s", err);
    if (!dl.inputs) return;
    CHECK(dataloader_load(&dl, 0) == 0 && dl.targets[2] == -1 && dl.targets[0] == toks[1]); // target 3 (3 % 3 == 0) masked
    int64_t counted = dataloader_count_targets(&dl, 0);
    CHECKF(counted == 11, "unit 0 counts %lld targets", (long long)counted); // targets 1..16 minus 3, 6, 9, 12, 15
    int fd = open(mpath, O_WRONLY);
    uint8_t seven = 7;
    CHECK(fd >= 0 && pwrite(fd, &seven, 1, SHARD_HEADER_BYTES + 5) == 1); // mask of token 5, in place
    CHECK(dataloader_count_targets(&dl, 0) == -1 && strstr(dl.err, "value 7 at index 5 is not 0 or 1") && strstr(dl.err, "mask_mid_run.bin.mask"));
    CHECKF(dataloader_load(&dl, 0) == -1 && strstr(dl.err, "value 7 at index 5"), "%s", dl.err);
    CHECK(ftruncate(fd, SHARD_HEADER_BYTES + 40) == 0);
    close(fd);
    CHECKF(dataloader_load(&dl, 5) == -1 && strstr(dl.err, "mask_mid_run.bin.mask") && strstr(dl.err, "shorter than at start-up"), "%s", dl.err);
    dataloader_free(&dl);
#ifndef ENABLE_FP32
    memset(mask, 0, sizeof(mask));
    CHECK(write_mask_file(mpath, mask, 200, 16, 1, err, sizeof(err)) == 0);
    char cmd[8192], out[16384];
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train -e tiny -layers 1 -channels 32 -heads 2 -vocab 1000 -b 2 -t 16 -x 1 -v 0 -s 0 -i %s", g_test_self, path);
    int rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 2 && strstr(out, "-i: every target is masked"), "an all-zero mask: exit %d\n%s", rc, out);
#endif
}

#ifndef ENABLE_FP32
// ZT_FAULT=slow:SUBSTR delays any checkpoint file created through ckpt_create (README: "any file"),
// not only the model file: a marker here (one 3 s sleep).
TEST(ckpt_fault_slow_any_file) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/slowfault_LATEST", test_tmpdir());
    setenv("ZT_FAULT", "slow:slowfault_LATEST", 1);
    int before = g_fault_slow_count;
    CHECK(write_text_file(path, "x\n") == 0);
    unsetenv("ZT_FAULT");
    CHECKF(g_fault_slow_count == before + 1, "ZT_FAULT=slow did not apply to a marker file (%d)", g_fault_slow_count - before);
}

static char rs_out[1 << 20];

static int rs_run(const char* env, const char* flags) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "%s OMP_NUM_THREADS=1 %s --train %s", env, g_test_self, flags);
    return test_run_cmd(cmd, rs_out, sizeof(rs_out));
}

// Everything a run could change in a directory: each entry's name, size and CRC32C (set-aside
// folders listed inside), sorted. A run that must change nothing leaves this text as it was.
static void rs_snapshot(const char* dir, char* out, size_t cap) {
    char cmd[PATH_MAX + 128];
    snprintf(cmd, sizeof(cmd), "cd %s && find . -type f | sort | xargs -r cksum", dir);
    test_run_cmd(cmd, out, cap);
}

#define RS_SMALL "-e tiny -layers 1 -channels 32 -heads 2 -b 2 -t 16 -s 0 -blas 0"

// The walk-through a new user follows (README): -tokenize a JSONL of prompt/completion pairs,
// fine-tune with checkpoints, the run killed mid-save, resumed with -o DIR -y 1 alone — the
// checkpoint supplies -e, -i, -j, -t, -x, -n and the rest, the settings table says so, and the
// steps trained again are the killed run's bit for bit (their logged loss and norm); the log lines of the
// steps trained again are moved, not deleted. Then an older checkpoint is exported: nothing in the
// directory changes, no sample is drawn. A resume on other data is refused naming -i and both
// values; -resume-change -i lets it through.
TEST(resume_walkthrough_finetune) {
    char jsonl[PATH_MAX], prefix[PATH_MAX], flags[8192], dir[PATH_MAX], hf[PATH_MAX];
    snprintf(jsonl, sizeof(jsonl), "%s/walk.jsonl", test_tmpdir());
    snprintf(prefix, sizeof(prefix), "%s/walk", test_tmpdir());
    snprintf(dir, sizeof(dir), "%s/walk_run", test_tmpdir());
    snprintf(hf, sizeof(hf), "%s/walk_hf", test_tmpdir());
    snprintf(flags, sizeof(flags), "rm -rf %s %s", dir, hf);
    test_run_cmd(flags, NULL, 0);
    FILE* f = fopen(jsonl, "w");
    for (int i = 0; i < 60; i++)
        fprintf(f, "{\"prompt\": \"Question %d: what is %d and %d?\", \"completion\": \" It is %d.\"}\n", i, i, i + 1, 2 * i + 1);
    fclose(f);
    snprintf(flags, sizeof(flags), "-tokenize %s -o %s -t 16 -val-every 10", jsonl, prefix);
    int rc = rs_run("", flags);
    CHECKF(rc == 0, "-tokenize (%d):\n%s", rc, rs_out);
    char data[4 * PATH_MAX];
    snprintf(data, sizeof(data), RS_SMALL " -i '%s_train_*.bin' -j '%s_val_*.bin' -v 2 -n 2", prefix, prefix);
    // killed while saving step 4 (every file written, no DONE), as kill -9 at the worst moment
    snprintf(flags, sizeof(flags), "%s -x 6 -o %s", data, dir);
    rc = rs_run("ZT_FAULT=crash:before-done:step4", flags);
    CHECKF(rc == 128 + SIGKILL && strstr(rs_out, "loss mask: on for -i"), "the killed run: exit %d\n%s", rc, rs_out);
    snprintf(flags, sizeof(flags), "-o %s -y 1", dir);
    rc = rs_run("", flags);
    char row[256];
    ux_table_value(rs_out, "-i", row, sizeof(row));
    CHECKF(rc == 0 && strstr(rs_out, "resume: step 2 ") && strstr(row, "(from checkpoint)") && strstr(row, "walk_train_"),
           "-o DIR -y 1 (%d), the -i row '%s':\n%s", rc, row, rs_out);
    CHECKF(strstr(rs_out, "resume: rank 0 read ") && strstr(rs_out, "state_00000002_00000.bin"), "which files the resume read is not said:\n%s", rs_out);
    char cmd[2 * PATH_MAX], listing[4096];
    snprintf(cmd, sizeof(cmd), "cat %s/set_aside_00000002_*/log.jsonl | grep -c '\"loss\"'", dir);
    test_run_cmd(cmd, listing, sizeof(listing));
    CHECKF(atoi(listing) == 2, "the log records of steps 3, 4 were not moved aside (%s)", listing);
    // steps 3 and 4 trained again are the killed run's, bit for bit (loss and norm as logged, %.9g):
    // the same model, data, batch, schedule and data order, all from the checkpoint
    char again[1024], first[1024];
    const char* pick = "grep -E '^\\{\"step\": [34], \"loss\"' %s | sed -E 's/(\"loss\": [^,]*, \"lr\": [^,]*, \"norm\": [^,]*).*/\\1/'";
    char fmt[512];
    snprintf(fmt, sizeof(fmt), pick, "%s/log.jsonl");
    snprintf(cmd, sizeof(cmd), fmt, dir);
    test_run_cmd(cmd, again, sizeof(again));
    snprintf(fmt, sizeof(fmt), pick, "%s/set_aside_00000002_*/log.jsonl");
    snprintf(cmd, sizeof(cmd), fmt, dir);
    test_run_cmd(cmd, first, sizeof(first));
    CHECKF(strstr(first, "\"step\": 3") && strstr(first, "\"step\": 4") && !strcmp(again, first), "steps 3-4 again differ from the killed run's:\n%s---\n%s", again, first);
    // export an older checkpoint: reading is not resuming
    char before[16384], after[16384];
    rs_snapshot(dir, before, sizeof(before));
    snprintf(flags, sizeof(flags), "-o %s -y 1 -resume-step 4 -x 0 -export-hf %s", dir, hf);
    rc = rs_run("", flags);
    rs_snapshot(dir, after, sizeof(after));
    CHECKF(rc == 0 && strstr(rs_out, "exported the model at step 4") && !strstr(rs_out, "sample at step") && !strstr(rs_out, "moved"),
           "export of step 4 (%d):\n%s", rc, rs_out);
    CHECKF(!strcmp(before, after), "exporting step 4 changed the directory:\n%s\n---\n%s", before, after);
    CHECKF(strstr(rs_out, "holds 1 set_aside_* folder(s)") && strstr(rs_out, "rm -r them"), "the set-aside folders are not said:\n%s", rs_out);
    // another dataset: refused before anything changes, naming the flag and both values
    snprintf(flags, sizeof(flags), "-o %s -y 1 -x 8 -i data/kjv_train.bin", dir);
    rc = rs_run("", flags);
    rs_snapshot(dir, after, sizeof(after));
    CHECKF(rc == 2 && strstr(rs_out, "flag -i: this run gives 'data/kjv_train.bin'") && strstr(rs_out, "walk_train_") && strstr(rs_out, "-resume-change -i"),
           "a resume on other data (%d):\n%s", rc, rs_out);
    CHECKF(!strcmp(before, after), "the refused resume changed the directory");
    snprintf(flags, sizeof(flags), "-o %s -y 1 -x 0 -i data/kjv_train.bin -resume-change -i", dir);
    rc = rs_run("", flags);
    CHECKF(rc == 0 && strstr(rs_out, "-i changed on purpose"), "-resume-change -i (%d):\n%s", rc, rs_out);
}

// A roll-back is a transaction: a changed run flag (a typo) or a corrupt step S ends the run with
// exit 2 before anything in the directory changes — no set-aside, LATEST where it was, no log line
// removed, leftovers of a crash still there — and the next plain -y 1 resumes the newest step. A
// real roll-back moves the later checkpoints and the log lines after S into the set-aside folder.
TEST(resume_rollback_transaction) {
    char dir[PATH_MAX], flags[8192], before[16384], after[16384], path[PATH_MAX + 64];
    snprintf(dir, sizeof(dir), "%s/rollback_tx", test_tmpdir());
    snprintf(flags, sizeof(flags), "rm -rf %s", dir);
    test_run_cmd(flags, NULL, 0);
    snprintf(flags, sizeof(flags), RS_SMALL " -v 0 -x 6 -n 2 -o %s", dir);
    int rc = rs_run("", flags);
    CHECKF(rc == 0, "first run (%d):\n%s", rc, rs_out);
    snprintf(path, sizeof(path), "%s/state_00000008_00000.bin.tmp.77", dir); // a crash's leftover
    FILE* f = fopen(path, "w");
    if (f) { fputs("half", f); fclose(f); }
    rs_snapshot(dir, before, sizeof(before));
    snprintf(flags, sizeof(flags), "-o %s -y 1 -resume-step 4 -x 8 -channels 48", dir);
    rc = rs_run("", flags);
    rs_snapshot(dir, after, sizeof(after));
    CHECKF(rc == 2 && strstr(rs_out, "flag -channels: this run gives '48'") && strstr(rs_out, "'32'"), "a changed -channels (%d):\n%s", rc, rs_out);
    CHECKF(!strcmp(before, after), "the refused roll-back changed the directory:\n%s\n---\n%s", before, after);
    // a corrupt step 4: every file checked before anything changes
    snprintf(path, sizeof(path), "%s/state_00000004_00000.bin", dir);
    int fd = open(path, O_RDWR);
    struct stat st;
    unsigned char byte = 0;
    CHECK(fd >= 0 && fstat(fd, &st) == 0 && pread(fd, &byte, 1, st.st_size - 100) == 1);
    byte ^= 0x40;
    CHECK(pwrite(fd, &byte, 1, st.st_size - 100) == 1);
    rs_snapshot(dir, before, sizeof(before));
    snprintf(flags, sizeof(flags), "-o %s -y 1 -resume-step 4 -x 8", dir);
    rc = rs_run("", flags);
    rs_snapshot(dir, after, sizeof(after));
    CHECKF(rc == 2 && strstr(rs_out, "fail their CRC32C"), "a corrupt step 4 (%d):\n%s", rc, rs_out);
    CHECKF(!strcmp(before, after), "the failed roll-back changed the directory:\n%s\n---\n%s", before, after);
    byte ^= 0x40;
    CHECK(pwrite(fd, &byte, 1, st.st_size - 100) == 1);
    close(fd);
    snprintf(flags, sizeof(flags), "-o %s -y 1 -x 0", dir);
    rc = rs_run("", flags);
    CHECKF(rc == 0 && strstr(rs_out, "resume: step 6 "), "after the failed roll-backs -y 1 does not resume step 6 (%d):\n%s", rc, rs_out);
    // the real roll-back: step 6 and the log's records of steps 5, 6 into the set-aside folder
    snprintf(flags, sizeof(flags), "-o %s -y 1 -resume-step 4 -x 5", dir);
    rc = rs_run("", flags);
    CHECKF(rc == 0 && strstr(rs_out, "rolled back to step 4: moved") && strstr(rs_out, "record(s) of log.jsonl after step 4 moved to"), "roll-back (%d):\n%s", rc, rs_out);
    char cmd[2 * PATH_MAX], n[64];
    snprintf(cmd, sizeof(cmd), "grep -c '\"loss\"' %s/set_aside_00000004_*/log.jsonl; ls %s/set_aside_00000004_*/DONE_00000006", dir, dir);
    CHECKF(test_run_cmd(cmd, n, sizeof(n)) == 0 && atoi(n) == 2, "the set-aside folder lacks the log lines or step 6: %s", n);
    CHECK(!ck_exists(dir, "state_00000008_00000.bin.tmp.77")); // the leftover went at the commit
}

// -e a model file inside -o: a new run with checkpoints loads it and leaves it where it is (it was
// moved aside after its header was read: "cannot open"); an orphan (no DONE) is not removed either.
TEST(resume_e_inside_o) {
    char dir[PATH_MAX], flags[8192], path[PATH_MAX + 32];
    snprintf(dir, sizeof(dir), "%s/e_inside_o", test_tmpdir());
    snprintf(flags, sizeof(flags), "rm -rf %s", dir);
    test_run_cmd(flags, NULL, 0);
    snprintf(flags, sizeof(flags), RS_SMALL " -v 0 -x 2 -n 2 -o %s", dir);
    int rc = rs_run("", flags);
    CHECKF(rc == 0, "first run (%d):\n%s", rc, rs_out);
    snprintf(flags, sizeof(flags), "cp %s/model_00000002.bin %s/e_inside_o_source.bin", dir, test_tmpdir());
    CHECK(test_run_cmd(flags, NULL, 0) == 0);
    for (int orphan = 0; orphan < 2; orphan++) {
        if (orphan) { snprintf(path, sizeof(path), "%s/DONE_00000002", dir); unlink(path); }
        // with DONE_2 (set aside): this run saves its own step 2 over the -e file's name; the
        // set-aside folder keeps the source (a hard link), byte for byte
        snprintf(flags, sizeof(flags), "-b 2 -t 16 -v 0 -s 0 -e %s/model_00000002.bin -o %s %s", dir, dir, orphan ? "-n 1 -x 1" : "-n 2 -x 2");
        rc = rs_run("", flags);
        CHECKF(rc == 0 && strstr(rs_out, "is this run's -e model") && ck_exists(dir, "model_00000002.bin"), "-e inside -o (orphan %d): exit %d\n%s", orphan, rc, rs_out);
        if (!orphan) {
            snprintf(flags, sizeof(flags), "cmp %s/set_aside_*/model_00000002.bin %s/e_inside_o_source.bin", dir, test_tmpdir());
            CHECKF(test_run_cmd(flags, NULL, 0) == 0, "the -e source is not whole in the set-aside folder:\n%s", rs_out);
        }
    }
}

// -prompt from a directory (was SIGSEGV), a pipe (/dev/stdin, <(...): "no prompt in it"), a .jsonl
// with a newline in a prompt; -temperature 0 is greedy: the same text with any -top-k, = -top-k 1.
TEST(prompt_files_and_greedy) {
    char flags[8192], out[4][16384], pf[PATH_MAX];
    const char* base = "-e tiny -layers 1 -channels 32 -heads 2 -b 1 -t 16 -x 0 -v 0 -s 0 -g 5";
    snprintf(flags, sizeof(flags), "%s -prompt @%s", base, test_tmpdir());
    int rc = rs_run("", flags);
    CHECKF(rc == 2 && strstr(rs_out, "is a directory"), "-prompt @DIR: exit %d\n%s", rc, rs_out);
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "printf 'In the beginning\\n' | OMP_NUM_THREADS=1 %s --train %s -prompt @/dev/stdin", g_test_self, base);
    rc = test_run_cmd(cmd, out[0], sizeof(out[0]));
    CHECKF(rc == 0 && strstr(out[0], "--- prompt\nIn the beginning\n--- reply\n"), "-prompt @/dev/stdin: exit %d\n%s", rc, out[0]);
    snprintf(cmd, sizeof(cmd), "bash -c \"OMP_NUM_THREADS=1 %s --train %s -prompt @<(printf 'And God said\\n')\"", g_test_self, base);
    rc = test_run_cmd(cmd, out[0], sizeof(out[0]));
    CHECKF(rc == 0 && strstr(out[0], "--- prompt\nAnd God said\n--- reply\n"), "-prompt @<(...): exit %d\n%s", rc, out[0]);
    snprintf(pf, sizeof(pf), "%s/prompts.jsonl", test_tmpdir());
    FILE* f = fopen(pf, "w");
    fprintf(f, "\"Q: who?\\nA:\"\n");
    fclose(f);
    for (int k = 0; k < 3; k++) { // greedy (top-k ignored), then top-k 1 (whatever the temperature)
        snprintf(flags, sizeof(flags), "%s -prompt @%s %s", base, pf, k == 0 ? "-temperature 0" : k == 1 ? "-temperature 0 -top-k 9" : "-top-k 1 -temperature 3");
        rc = rs_run("", flags);
        CHECKF(rc == 0 && strstr(rs_out, "--- prompt\nQ: who?\nA:\n--- reply\n"), "-prompt @FILE.jsonl (%d):\n%s", rc, rs_out);
        const char* p = strstr(rs_out, "prompt 1:");
        const char* e = p ? strstr(p, "\n--- end: ") : NULL;
        snprintf(out[k + 1], sizeof(out[k + 1]), "%.*s", p && e ? (int)(e - p) : 0, p ? p : "");
    }
    CHECKF(out[1][0] && !strcmp(out[1], out[2]) && !strcmp(out[1], out[3]), "greedy differs with -top-k 9 or from -top-k 1:\n%s\n%s\n%s", out[1], out[2], out[3]);
}

// Messages the campaign found untrue or missing: the val batches an evaluation really uses, -m -5,
// -temperature -1, a head count from a file blamed on -channels/-heads, a [rank 0] prefix on one
// process, dev/plot.py without matplotlib.
TEST(cli_messages_true) {
    char flags[8192], path[PATH_MAX], err[512];
    snprintf(path, sizeof(path), "%s/val_small.bin", test_tmpdir()); // 100 tokens: 6 samples of 17, 3 batches of 2
    uint16_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = (uint16_t)(i * 31 % 5000);
    CHECK(write_token_shard(path, toks, 100, err, sizeof(err)) == 0);
    snprintf(flags, sizeof(flags), RS_SMALL " -x 0 -v 1 -m 50 -j %s", path);
    int rc = rs_run("", flags);
    CHECKF(rc == 0 && strstr(rs_out, "evaluating the val loss on 3 batch(es) of 2 x 16 tokens per rank (the whole val set)"),
           "the val batches message (%d):\n%s", rc, rs_out);
    rc = rs_run("", RS_SMALL " -x 0 -m -5");
    CHECKF(rc == 2 && strstr(rs_out, "flag -m: -5"), "-m -5: exit %d\n%s", rc, rs_out);
    rc = rs_run("", RS_SMALL " -x 0 -temperature -1");
    CHECKF(rc == 2 && strstr(rs_out, "flag -temperature"), "-temperature -1: exit %d\n%s", rc, rs_out);
    GPTConfig c = gpt2_config(1, 32, 3, 128, 128, 16); // C = 32 is not a multiple of NH = 3
    ModelDesc d;
    model_describe(&d, &c);
    snprintf(path, sizeof(path), "%s/heads3.bin", test_tmpdir());
    FILE* f = fopen(path, "wb");
    int header[256] = {MODEL_MAGIC, 3, c.maxT, c.V, c.L, c.NH, c.C, c.Vp};
    fwrite(header, sizeof(header), 1, f);
    float* zeros = (float*)calloc(d.num_params, sizeof(float));
    fwrite(zeros, sizeof(float), d.num_params, f);
    fclose(f);
    free(zeros);
    snprintf(flags, sizeof(flags), "-e %s -b 1 -t 8 -x 0 -v 0 -s 0", path);
    rc = rs_run("", flags);
    CHECKF(rc == 2 && strstr(rs_out, "its header's C / NH, 32 / 3") && !strstr(rs_out, "-channels"), "a file's head count (%d):\n%s", rc, rs_out);
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/rank_prefix", test_tmpdir());
    snprintf(flags, sizeof(flags), RS_SMALL " -v 0 -x 1 -n 1 -o %s", dir);
    rc = rs_run("ZT_FAULT=enospc:state_00000001", flags);
    CHECKF(strstr(rs_out, "error: writing ") && !strstr(rs_out, "[rank 0]"), "one process, a failed save (%d):\n%s", rc, rs_out);
    // a version-1 tokenizer file (no <|endoftext|> id): said, with what it means for -prompt
    snprintf(path, sizeof(path), "%s/tok_v1.bin", test_tmpdir());
    snprintf(flags, sizeof(flags), "cp data/gpt2_tokenizer.bin %s && printf '\\001\\000\\000\\000' | dd of=%s bs=1 seek=4 conv=notrunc 2>/dev/null", path, path);
    CHECK(test_run_cmd(flags, NULL, 0) == 0);
    snprintf(flags, sizeof(flags), "-e tiny -layers 1 -channels 32 -heads 2 -b 1 -t 16 -x 0 -v 0 -s 0 -g 2 -prompt hi -tokenizer %s", path);
    rc = rs_run("", flags);
    CHECKF(rc == 0 && strstr(rs_out, "is a version-1 file") && strstr(rs_out, "cannot end a completion"), "a version-1 tokenizer (%d):\n%s", rc, rs_out);
    snprintf(path, sizeof(path), "%s/plot_log.jsonl", test_tmpdir());
    f = fopen(path, "w");
    fprintf(f, "{\"step\": 1, \"loss\": 2.0, \"ms\": 1, \"tok_s\": 1, \"mem_tagged\": 1, \"vmhwm\": 1}\n");
    fclose(f);
    snprintf(flags, sizeof(flags), "python3 -c \"import sys; sys.modules['matplotlib'] = None; sys.argv = ['dev/plot.py', '%s', '-o', '%s/x.png']; "
             "exec(open('dev/plot.py').read())\"", path, test_tmpdir());
    rc = test_run_cmd(flags, rs_out, sizeof(rs_out));
    CHECKF(rc == 2 && strstr(rs_out, "matplotlib") && strstr(rs_out, "HINT:") && !strstr(rs_out, "Traceback"), "dev/plot.py without matplotlib (%d):\n%s", rc, rs_out);
}

// -plan -host-mem: the offload rows use the planned node's host memory, and the output says whose
// (without it: this machine's available memory, said so).
TEST(plan_host_mem_flag) {
    const char* base = "-plan -device cuda -gpu h100 -gpu-mem 80GiB -e d12 -b 4 -t 1024 -world 8";
    char flags[1024];
    snprintf(flags, sizeof(flags), "%s -host-mem 3TiB", base);
    int rc = rs_run("", flags);
    CHECKF(rc == 0 && strstr(rs_out, "on the host, 3.00 TiB per node (-host-mem)"), "-plan -host-mem 3TiB (%d):\n%s", rc, rs_out);
    rc = rs_run("", base);
    CHECKF(rc == 0 && strstr(rs_out, "(available host memory on this machine; -host-mem sets the planned node's)"), "-plan without -host-mem (%d):\n%s", rc, rs_out);
    snprintf(flags, sizeof(flags), "%s -host-mem lots", base);
    rc = rs_run("", flags);
    CHECKF(rc == 2 && strstr(rs_out, "flag -host-mem: 'lots'"), "-host-mem lots (%d):\n%s", rc, rs_out);
}
#endif // ENABLE_FP32
