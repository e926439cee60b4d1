// test/test_reliability.h — what a run refuses or keeps so that nothing is lost or mixed
// (docs/reliability.md): every output path made or refused before the first step, regular files
// only where a file is read, the ZeRO stage a resume keeps, PEFT options this trainer does not
// implement refused, an adapter's non-finite values blamed on the adapter, a LoRA base drawn from
// -seed never re-drawn on resume.

#define REL_LORA "-e tiny -layers 1 -channels 32 -heads 4 -t 16 -b 1 -v 0 -s 0 -lora 2 -lora-targets c_fc"

static void rel_write(const char* path, const char* text) {
    FILE* f = fopen(path, "wb");
    if (f) { fputs(text, f); fclose(f); }
}

// Output paths: missing directories made with their parents before the first step (the run then
// writes there); a file where a directory must be, or a directory where -export's file must be,
// refused with exit 2 before any step, naming the component at fault.
TEST(rel_output_paths) {
    const char* dir = zt_dir("rel_out");
    char flags[4 * PATH_MAX], file[PATH_MAX + 16], path[2 * PATH_MAX];
    mkdir(dir, 0755);
    snprintf(file, sizeof(file), "%s/plain", dir);
    rel_write(file, "a file\n");
    // a LoRA run whose -lora-export and -export-hf directories (and their parents) do not exist yet
    snprintf(flags, sizeof(flags), REL_LORA " -x 1 -lora-export %s/new/deeper/adapter -export-hf %s/new/hf", dir, dir);
    int rc = cli_run(flags, cli_out, sizeof(cli_out));
    snprintf(path, sizeof(path), "%s/new/deeper/adapter/adapter_config.json", dir);
    CHECKF(rc == 0 && access(path, F_OK) == 0, "missing export directories: exit %d, %s %s:\n%s", rc, path, access(path, F_OK) ? "missing" : "written", cli_out);
    static const struct { const char* flags; const char* expect; } bad[] = {
        {REL_LORA " -x 1 -lora-export FILE/adapter", "flag -lora-export FILE/adapter: FILE is a file, not a directory"},
        {"-e tiny -layers 1 -t 16 -b 1 -x 1 -v 0 -s 0 -export-hf FILE/hf", "flag -export-hf FILE/hf: FILE is a file, not a directory"},
        {"-e tiny -layers 1 -t 16 -b 1 -x 1 -v 0 -s 0 -export FILE/model.bin", "flag -export FILE/model.bin: FILE is a file, not a directory"},
        {"-e tiny -layers 1 -t 16 -b 1 -x 1 -v 0 -s 0 -export DIR", "flag -export DIR: a directory"},
        {"-e tiny -layers 1 -t 16 -b 1 -x 1 -v 0 -s 0 -o FILE/run", "flag -o FILE/run: FILE is a file, not a directory"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char f2[4 * PATH_MAX] = "", want[4 * PATH_MAX] = "";
        for (int k = 0; k < 2; k++) { // FILE and DIR replaced in the flags and in the expected line
            const char* src = k ? bad[i].expect : bad[i].flags;
            char* out = k ? want : f2;
            size_t n = 0;
            for (const char* p = src; *p && n + PATH_MAX + 2 < sizeof(f2);) {
                if (!strncmp(p, "FILE", 4)) { n += snprintf(out + n, sizeof(f2) - n, "%s", file); p += 4; }
                else if (!strncmp(p, "DIR", 3)) { n += snprintf(out + n, sizeof(f2) - n, "%s", dir); p += 3; }
                else out[n++] = *p++;
            }
            out[n] = 0;
        }
        rc = cli_run(f2, cli_out, sizeof(cli_out));
        CHECKF(rc == 2 && strstr(cli_out, want) && !strstr(cli_out, "step "), "'%s': exit %d, expected 2 with '%s' before any step:\n%s", f2, rc, want, cli_out);
    }
}

// Regular files only: a FIFO where a file is read (config.json of -e DIR, a shard of -i, a PEFT
// adapter's config) is refused at once, never waited on (each run bounded by timeout 60).
TEST(rel_fifo_refused) {
    const char* dir = zt_dir("rel_fifo");
    char cmd[4 * PATH_MAX], path[PATH_MAX + 64];
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/hf", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/hf/model.safetensors", dir);
    rel_write(path, "");
    snprintf(path, sizeof(path), "%s/hf/config.json", dir);
    CHECK(mkfifo(path, 0644) == 0);
    snprintf(path, sizeof(path), "%s/shard_000.bin", dir);
    CHECK(mkfifo(path, 0644) == 0);
    snprintf(path, sizeof(path), "%s/peft", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/peft/adapter_config.json", dir);
    CHECK(mkfifo(path, 0644) == 0);
    static const struct { const char* flags; const char* file; } cases[] = {
        {"-e %s/hf -x 1 -v 0 -s 0", "hf/config.json"},
        {"-e tiny -layers 1 -t 16 -b 1 -x 1 -v 0 -s 0 -i %s/shard_*.bin", "shard_000.bin"},
        {REL_LORA " -x 1 -lora-init %s/peft", "peft/adapter_config.json"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char flags[2 * PATH_MAX];
        snprintf(flags, sizeof(flags), cases[i].flags, dir);
        snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=2 timeout 60 %s --train %s", g_test_self, flags);
        int rc = test_run_cmd(cmd, cli_out, sizeof(cli_out));
        CHECKF(rc == 2 && strstr(cli_out, cases[i].file) && strstr(cli_out, "not a regular file"),
               "'%s': exit %d (124: it waited on the FIFO), expected 2 naming %s as not a regular file:\n%s", flags, rc, cases[i].file, cli_out);
    }
}

// -z, -r and -offload are recorded: a resume that gives none runs the stage the run ran (at real
// scale another stage can run out of memory after the load); a given one wins and is said.
TEST(rel_resume_keeps_the_stage) {
    const char* d = zt_dir("rel_stage");
    char dir[PATH_MAX], flags[2 * PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", d);
    snprintf(flags, sizeof(flags), CLI_SMALL " -x 2 -n 2 -z 2 -r 2 -o %s", dir);
    int rc = cli_run(flags, cli_out, sizeof(cli_out));
    CHECKF(rc == 0, "the run at -z 2 -r 2: exit %d\n%s", rc, cli_out);
    snprintf(flags, sizeof(flags), "-o %s -y 1 -x 3", dir);
    rc = cli_run(flags, cli_out, sizeof(cli_out));
    CHECKF(rc == 0 && strstr(cli_out, "| ZeRO-2 | recompute -r 2"), "resume without -z: exit %d, expected ZeRO-2 with -r 2:\n%s", rc, cli_out);
    snprintf(flags, sizeof(flags), "-o %s -y 1 -x 4 -z 1", dir);
    rc = cli_run(flags, cli_out, sizeof(cli_out));
    CHECKF(rc == 0 && strstr(cli_out, "resume: -z 1 given, the checkpoint of step 3 ran -z 2") && strstr(cli_out, "| ZeRO-1 | recompute -r 2"),
           "resume with -z 1: exit %d, expected the change said and ZeRO-1:\n%s", rc, cli_out);
}

// PEFT options this trainer does not implement, at a non-default value, refused naming the field
// (use_rslora applied as a plain adapter would train at another scale); a NaN in an adapter named
// as the adapter's, not the base's.
TEST(rel_lora_init_peft_options) {
    const char* d = zt_dir("rel_peft");
    char dir[PATH_MAX], flags[4 * PATH_MAX], path[PATH_MAX + 64], cmd[4 * PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", d);
    mkdir(dir, 0755);
    snprintf(flags, sizeof(flags), REL_LORA " -x 1 -lora-export %s/base", dir);
    CHECKF(cli_run(flags, cli_out, sizeof(cli_out)) == 0, "writing an adapter failed:\n%s", cli_out);
    snprintf(path, sizeof(path), "%s/base/adapter_config.json", dir);
    char* cfg = zt_read_file(path);
    CHECK(cfg != NULL);
    if (!cfg) return;
    static const struct { const char* from; const char* to; const char* field; } opts[] = {
        {"\"use_rslora\": false", "\"use_rslora\": true", "use_rslora is true"},
        {"\"use_dora\": false", "\"use_dora\": true", "use_dora is true"},
        {"\"alpha_pattern\": {}", "\"alpha_pattern\": {\"c_fc\": 8}", "alpha_pattern is an object"},
        {"\"rank_pattern\": {}", "\"rank_pattern\": {\"c_fc\": 4}", "rank_pattern is an object"},
        {"\"modules_to_save\": null", "\"modules_to_save\": [\"lm_head\"]", "modules_to_save is a list"},
        {"\"layers_to_transform\": null", "\"layers_to_transform\": [0]", "layers_to_transform is a list"},
        {"\"bias\": \"none\"", "\"bias\": \"lora_only\"", "bias is \"lora_only\""},
    };
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        const char* at = strstr(cfg, opts[i].from);
        CHECKF(at != NULL, "our adapter_config.json lacks %s", opts[i].from);
        if (!at) continue;
        snprintf(cmd, sizeof(cmd), "rm -rf %s/o && mkdir -p %s/o && cp %s/base/adapter_model.safetensors %s/o/", dir, dir, dir, dir);
        CHECK(test_run_cmd(cmd, NULL, 0) == 0);
        char* text = (char*)malloc(strlen(cfg) + 256);
        snprintf(text, strlen(cfg) + 256, "%.*s%s%s", (int)(at - cfg), cfg, opts[i].to, at + strlen(opts[i].from));
        snprintf(path, sizeof(path), "%s/o/adapter_config.json", dir);
        rel_write(path, text);
        free(text);
        snprintf(flags, sizeof(flags), REL_LORA " -x 1 -lora-init %s/o", dir);
        int rc = cli_run(flags, cli_out, sizeof(cli_out));
        CHECKF(rc == 2 && strstr(cli_out, opts[i].field) && strstr(cli_out, "does not implement") && !strstr(cli_out, "step "),
               "%s: exit %d, expected 2 naming '%s':\n%s", opts[i].to, rc, opts[i].field, cli_out);
    }
    free(cfg);
    // a NaN in the first lora_A value: blamed on the adapter's tensor
    snprintf(cmd, sizeof(cmd), "rm -rf %s/o && cp -r %s/base %s/o", dir, dir, dir);
    CHECK(test_run_cmd(cmd, NULL, 0) == 0);
    snprintf(path, sizeof(path), "%s/o/adapter_model.safetensors", dir);
    FILE* fp = fopen(path, "r+b");
    uint64_t hlen = 0;
    uint32_t nan_bits = 0x7FC00000u;
    CHECK(fp && fread(&hlen, 8, 1, fp) == 1);
    char* hdr = (char*)calloc(hlen + 1, 1);
    CHECK(fp && fread(hdr, 1, hlen, fp) == hlen);
    const char* a = strstr(hdr, "lora_A.weight\"");
    const char* offs = a ? strstr(a, "\"data_offsets\"") : NULL;
    long long begin = -1;
    CHECKF(offs && sscanf(strchr(offs, '[') + 1, "%lld", &begin) == 1, "no lora_A tensor's offsets in %s", path);
    CHECK(fp && begin >= 0 && fseek(fp, (long)(8 + hlen + begin), SEEK_SET) == 0 && fwrite(&nan_bits, 4, 1, fp) == 1);
    if (fp) fclose(fp);
    free(hdr);
    snprintf(flags, sizeof(flags), REL_LORA " -x 1 -lora-init %s/o", dir);
    int rc = cli_run(flags, cli_out, sizeof(cli_out));
    CHECKF(rc == 2 && strstr(cli_out, "-lora-init") && strstr(cli_out, "lora_A.weight holds 1 non-finite value(s)") && !strstr(cli_out, "the model file is corrupt"),
           "a NaN in the adapter: exit %d, expected 2 blaming the adapter's tensor:\n%s", rc, cli_out);
}

// A LoRA run on a descriptor (-e tiny) draws its frozen base from -seed: a resume that changes
// -seed on purpose would train the adapters on another base. Refused, naming why.
TEST(rel_lora_descriptor_seed_change) {
    const char* d = zt_dir("rel_seed");
    char dir[PATH_MAX], flags[2 * PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", d);
    snprintf(flags, sizeof(flags), REL_LORA " -x 1 -n 1 -o %s", dir);
    int rc = cli_run(flags, cli_out, sizeof(cli_out));
    CHECKF(rc == 0, "the LoRA run: exit %d\n%s", rc, cli_out);
    snprintf(flags, sizeof(flags), "-o %s -y 1 -x 2 -seed 7 -resume-change -seed", dir);
    rc = cli_run(flags, cli_out, sizeof(cli_out));
    CHECKF(rc == 2 && strstr(cli_out, "frozen base is initialised from -seed"), "-resume-change -seed: exit %d, expected 2:\n%s", rc, cli_out);
}

// A trainer run with ZT_FAULT (and the kilobyte shard limit) in its environment.
static int rel_run_env(const char* env, const char* flags) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=2 ZT_HF_SHARD_BYTES=60000 %s %s --train %s", env, g_test_self, flags);
    return test_run_cmd(cmd, cli_out, sizeof(cli_out));
}

// Is dir the same export as copy (leftovers of an interrupted export aside)? 1 when so.
static int rel_same_export(const char* dir, const char* copy) {
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof(cmd), "diff -r -x '*.tmp.*' -x '*.replaced.*' %s %s", dir, copy);
    return test_run_cmd(cmd, NULL, 0) == 0;
}

// -export-hf over an earlier export is all or nothing: killed at any rename of the commit
// (ZT_FAULT=crash:export-commit:K), the directory is the earlier export whole or refused by -e
// (no config.json), never a loadable mix; a rename that fails (ZT_FAULT=eio-rename) leaves the
// earlier export whole, byte for byte; the next export removes what a killed one left. The same
// for -lora-export's two files.
TEST(rel_export_all_or_nothing) {
    const char* d = zt_dir("rel_export");
    char dir[PATH_MAX], flags[4 * PATH_MAX], cmd[4 * PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", d);
    mkdir(dir, 0755);
    const char* M = "-e tiny -layers 2 -channels 32 -heads 4 -t 16 -b 1 -v 0 -s 0 -x 1";
    snprintf(flags, sizeof(flags), "%s -export-hf %s/hf", M, dir);
    CHECKF(rel_run_env("", flags) == 0, "the first export failed:\n%s", cli_out);
    snprintf(cmd, sizeof(cmd), "cp -r %s/hf %s/old && ls %s/hf | grep -c '^model-0000.-of-00004.safetensors$'", dir, dir, dir);
    CHECKF(test_run_cmd(cmd, cli_out, sizeof(cli_out)) == 0 && atoi(cli_out) == 4, "expected 4 shards, ls found %s", cli_out);
    char hf[PATH_MAX + 8], old[PATH_MAX + 8];
    snprintf(hf, sizeof(hf), "%s/hf", dir);
    snprintf(old, sizeof(old), "%s/old", dir);
    int refused = 0, whole = 0;
    for (int K = 1; K <= 11; K += 2) { // every other rename of the 12 (config.json aside, 4 shards and the index out and in, config.json in)
        snprintf(cmd, sizeof(cmd), "rm -rf %s && cp -r %s %s", hf, old, hf);
        CHECK(test_run_cmd(cmd, NULL, 0) == 0);
        char env[64];
        snprintf(env, sizeof(env), "ZT_FAULT=crash:export-commit:%d", K);
        snprintf(flags, sizeof(flags), "%s -seed 5 -export-hf %s", M, hf);
        int rc = rel_run_env(env, flags);
        CHECKF(rc == 128 + SIGKILL, "K = %d: exit %d, expected the kill:\n%s", K, rc, cli_out);
        snprintf(flags, sizeof(flags), "-e %s -t 16 -b 1 -v 0 -s 0 -x 0", hf);
        int lrc = rel_run_env("", flags);
        snprintf(cmd, sizeof(cmd), "%s/config.json", hf);
        if (access(cmd, F_OK) == 0) { // loadable: then it is the earlier export, byte for byte
            CHECKF(lrc == 0 && rel_same_export(hf, old), "K = %d: config.json present, but not the earlier export whole (load exit %d):\n%s", K, lrc, cli_out);
            whole++;
        } else {
            CHECKF(lrc == 2 && strstr(cli_out, "was interrupted"), "K = %d: no config.json: -e exit %d, expected 2 saying the export was interrupted:\n%s", K, lrc, cli_out);
            refused++;
        }
    }
    CHECKF(whole >= 1 && refused >= 4, "kills: %d left the earlier export whole, %d a refused directory", whole, refused);
    // the export after a cut commit restores the earlier export first: a rename failing in it then
    // leaves that export whole, as without the cut
    snprintf(flags, sizeof(flags), "%s -seed 5 -export-hf %s", M, hf);
    int frc = rel_run_env("ZT_FAULT=eio-rename:model-00003", flags);
    CHECKF(frc == 1 && strstr(cli_out, "the earlier export restored first") && rel_same_export(hf, old), "a failing export after a cut one: exit %d, "
           "the directory %s:\n%s", frc, rel_same_export(hf, old) ? "the earlier export" : "changed", cli_out);
    snprintf(cmd, sizeof(cmd), "%s -seed 5 -export-hf %s", M, hf); // (cut it again for the next check)
    rel_run_env("ZT_FAULT=crash:export-commit:5", cmd);
    // the next export over the killed one's leftovers: done, the leftovers removed and said
    snprintf(flags, sizeof(flags), "%s -seed 5 -export-hf %s", M, hf);
    int rc = rel_run_env("", flags);
    snprintf(cmd, sizeof(cmd), "ls %s | grep -c 'tmp\\|replaced'", hf);
    test_run_cmd(cmd, cmd, sizeof(cmd));
    CHECKF(rc == 0 && strstr(cli_out, "file(s) an interrupted export left") && atoi(cmd) == 0, "the export after a kill: exit %d, %d leftovers:\n%s", rc, atoi(cmd), cli_out);
    // a rename that fails mid-commit: the earlier export whole
    snprintf(cmd, sizeof(cmd), "rm -rf %s && cp -r %s %s", hf, old, hf);
    CHECK(test_run_cmd(cmd, NULL, 0) == 0);
    rc = rel_run_env("ZT_FAULT=eio-rename:model-00003", flags);
    snprintf(cmd, sizeof(cmd), "diff -r %s %s", hf, old);
    CHECKF(rc == 1 && strstr(cli_out, "left whole") && test_run_cmd(cmd, NULL, 0) == 0, "a failed rename: exit %d, directory %s:\n%s", rc,
           test_run_cmd(cmd, NULL, 0) == 0 ? "the earlier export" : "changed", cli_out);
    // -lora-export: the adapter's two files the same way
    const char* L = "-e tiny -layers 1 -channels 32 -heads 4 -t 16 -b 1 -v 0 -s 0 -x 1 -lora 2 -lora-targets c_fc";
    snprintf(flags, sizeof(flags), "%s -lora-export %s/ad", L, dir);
    CHECKF(rel_run_env("", flags) == 0, "the first adapter export failed:\n%s", cli_out);
    snprintf(cmd, sizeof(cmd), "cp -r %s/ad %s/ad_old", dir, dir);
    CHECK(test_run_cmd(cmd, NULL, 0) == 0);
    snprintf(flags, sizeof(flags), "%s -seed 5 -lora-export %s/ad", L, dir);
    rc = rel_run_env("ZT_FAULT=eio-rename:adapter_model", flags);
    snprintf(cmd, sizeof(cmd), "diff -r %s/ad %s/ad_old", dir, dir);
    CHECKF(rc == 1 && test_run_cmd(cmd, NULL, 0) == 0, "-lora-export with a failed rename: exit %d, the earlier adapter %s:\n%s", rc,
           test_run_cmd(cmd, NULL, 0) == 0 ? "whole" : "changed", cli_out);
    rc = rel_run_env("ZT_FAULT=crash:export-commit:2", flags); // killed after adapter_config.json went aside
    CHECKF(rc == 128 + SIGKILL, "-lora-export killed: exit %d\n%s", rc, cli_out);
    snprintf(flags, sizeof(flags), "%s -lora-init %s/ad", L, dir);
    rc = rel_run_env("", flags);
    CHECKF(rc == 2 && strstr(cli_out, "adapter_config.json"), "-lora-init of the killed export: exit %d, expected 2:\n%s", rc, cli_out);
}

// A stop signal mid-run: `launcher` starts this binary as the trainer with `flags` (output in
// dir/run.log); once step 3 is logged, `sig` goes to `target` ("$p": the launcher or the process
// itself, or a shell expression naming one rank). Returns the run's exit code; *stopped is the step
// its stop line names (-1: none).
static int rel_stop_run(const char* launcher, const char* flags, const char* dir, const char* sig, const char* target, int* stopped) {
    char cmd[8192], log[PATH_MAX + 16];
    snprintf(log, sizeof(log), "%s/run.log", dir);
    snprintf(cmd, sizeof(cmd), ZT_CLEAN_ENV "mkdir -p %s; rm -f %s; OMP_NUM_THREADS=1 %s %s --train %s > %s 2>&1 & p=$!; i=0; "
             "while [ $i -lt 600 ] && ! grep -q '^step     3/' %s; do sleep 0.05; i=$((i+1)); done; "
             "kill -s %s %s; wait $p; exit $?", dir, log, launcher, g_test_self, flags, log, log, sig, target);
    int rc = test_run_cmd(cmd, NULL, 0);
    char* out = zt_read_file(log);
    snprintf(cli_out, sizeof(cli_out), "%s", out ? out : "(no log)");
    const char* at = out ? strstr(out, "after step ") : NULL;
    *stopped = at && strstr(out, "stopped (") ? atoi(at + 11) : -1;
    free(out);
    return rc;
}

#define REL_STOP_MODEL "-e tiny -layers 2 -channels 64 -heads 2 -b 4 -t 32 -v 0 -s 0 -blas 0 -threads 1 -k constant -u 0"

// A stop signal reaching one process: it finishes the step, writes a checkpoint, exits with 5 and
// says so; resumed, it ends bitwise where the run without the signal ends. Then dev/launch.sh: a
// SIGTERM to the launcher reaches the rank, which stops the same way, and the launcher returns 5.
TEST(rel_stop_signal_one_process) {
    const char* d = zt_dir("rel_stop1");
    char dir[PATH_MAX], flags[2 * PATH_MAX], hash_a[512], hash_b[512];
    snprintf(dir, sizeof(dir), "%s", d);
    snprintf(flags, sizeof(flags), REL_STOP_MODEL " -x 100000 -o %s/out", dir);
    int S = -1, rc = rel_stop_run("", flags, dir, "TERM", "$p", &S);
    CHECKF(rc == 5 && S >= 3 && strstr(cli_out, "stop: SIGUSR1, SIGINT or SIGTERM ends the run after the step in flight with a checkpoint"),
           "SIGTERM: exit %d (expected 5), stopped after step %d:\n%s", rc, S, cli_out);
    if (S < 3) return;
    snprintf(flags, sizeof(flags), "-o %s/out -y 1 -x %d -log-hash 1", dir, S + 2);
    rc = cli_run(flags, cli_out, sizeof(cli_out));
    cli_hash_line(cli_out, hash_a, sizeof(hash_a));
    CHECKF(rc == 0 && strstr(cli_out, "resume: step"), "the resume after the stop: exit %d\n%s", rc, cli_out);
    snprintf(flags, sizeof(flags), REL_STOP_MODEL " -x %d -log-hash 1", S + 2);
    rc = cli_run(flags, cli_out, sizeof(cli_out));
    cli_hash_line(cli_out, hash_b, sizeof(hash_b));
    CHECKF(rc == 0 && hash_a[0] && !strcmp(hash_a, hash_b), "stopped at %d and resumed to %d: '%s'; without the stop: '%s'", S, S + 2, hash_a, hash_b);
    // dev/launch.sh passes the signal on and returns the rank's code: SIGTERM to the script; then
    // SIGINT to its whole process group, as Ctrl-C in a terminal sends it (the rank hears it twice,
    // from the terminal and from the script: one stop, not an immediate end)
    snprintf(flags, sizeof(flags), REL_STOP_MODEL " -x 100000 -o %s/out2", dir);
    rc = rel_stop_run("MASTER_PORT=29617 bash dev/launch.sh 1", flags, dir, "TERM", "$p", &S);
    CHECKF(rc == 5 && S >= 3, "dev/launch.sh with SIGTERM: exit %d (expected 5), stopped after step %d:\n%s", rc, S, cli_out);
    snprintf(flags, sizeof(flags), REL_STOP_MODEL " -x 100000 -o %s/out3", dir);
    rc = rel_stop_run("MASTER_PORT=29618 setsid bash dev/launch.sh 1", flags, dir, "INT", "-- -$p", &S);
    CHECKF(rc == 5 && S >= 3, "dev/launch.sh with SIGINT to its process group (Ctrl-C): exit %d (expected 5), stopped after step %d:\n%s", rc, S, cli_out);
}

// R = 2 under mpirun: SIGUSR1 to one rank only (as a scheduler may deliver it) stops both after the
// same step, the checkpoint written, exit 5; resumed, bitwise the run without the signal.
TEST(rel_stop_signal_two_ranks) {
    const char* d = zt_dir("rel_stop2");
    char dir[PATH_MAX], flags[2 * PATH_MAX], launcher[PATH_MAX], target[2 * PATH_MAX], hash_a[512], hash_b[512];
    snprintf(dir, sizeof(dir), "%s", d);
    snprintf(launcher, sizeof(launcher), "mpirun -np 2 --oversubscribe --allow-run-as-root --mca mpi_yield_when_idle 1");
    snprintf(flags, sizeof(flags), REL_STOP_MODEL " -z 2 -x 100000 -o %s/out", dir);
    snprintf(target, sizeof(target), "$(pgrep -f '^%s --train .*%s/out' | tail -n 1)", g_test_self, dir);
    int S = -1, rc = rel_stop_run(launcher, flags, dir, "USR1", target, &S);
    CHECKF(rc == 5 && S >= 3, "SIGUSR1 to one rank: exit %d (expected 5), stopped after step %d:\n%s", rc, S, cli_out);
    if (S < 3) return;
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), ZT_CLEAN_ENV "OMP_NUM_THREADS=1 %s %s --train -o %s/out -y 1 -x %d -log-hash 1", launcher, g_test_self, dir, S + 2);
    rc = test_run_cmd(cmd, cli_out, sizeof(cli_out));
    cli_hash_line(cli_out, hash_a, sizeof(hash_a));
    CHECKF(rc == 0 && strstr(cli_out, "| ZeRO-2 |"), "the resume after the stop: exit %d\n%s", rc, cli_out);
    snprintf(cmd, sizeof(cmd), ZT_CLEAN_ENV "OMP_NUM_THREADS=1 %s %s --train " REL_STOP_MODEL " -z 2 -x %d -log-hash 1", launcher, g_test_self, S + 2);
    rc = test_run_cmd(cmd, cli_out, sizeof(cli_out));
    cli_hash_line(cli_out, hash_b, sizeof(hash_b));
    CHECKF(rc == 0 && hash_a[0] && !strcmp(hash_a, hash_b), "R = 2 stopped at %d and resumed to %d: '%s'; without the stop: '%s'", S, S + 2, hash_a, hash_b);
}

// -tokenize's output is never taken for whole when it is not: killed after its 2nd shard
// (ZT_FAULT=crash:tokenize-shard:2), PREFIX.tokenizing stays and training on the shards is refused;
// the next -tokenize removes what the killed one left (said) and its shards train; a shard missing
// from the numbering is warned about, one changed since is refused by the record (PREFIX.shards);
// a later -tokenize with fewer shards removes the earlier one's
// extra shards; in JSONL mode every shard that has its name has its mask (the mask is written first).
TEST(rel_tokenize_partial_output) {
    const char* d = zt_dir("rel_tok");
    char dir[PATH_MAX], text[PATH_MAX + 16], jsonl[PATH_MAX + 16], flags[4 * PATH_MAX], cmd[4 * PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", d);
    mkdir(dir, 0755);
    snprintf(text, sizeof(text), "%s/corpus.txt", dir);
    FILE* f = fopen(text, "w");
    for (int k = 0; k < 400; k++) fprintf(f, "Line %d: and the evening and the morning were the %dth day.\n", k, k);
    fclose(f);
    snprintf(flags, sizeof(flags), "-tokenize %s -o %s/c -shard-tokens 1500 -val-every 0", text, dir);
    int rc = rel_run_env("ZT_FAULT=crash:tokenize-shard:2", flags);
    snprintf(cmd, sizeof(cmd), "%s/c.tokenizing", dir);
    CHECKF(rc == 128 + SIGKILL && access(cmd, F_OK) == 0, "the killed -tokenize: exit %d, marker %s", rc, access(cmd, F_OK) ? "missing" : "present");
    snprintf(flags, sizeof(flags), "-e tiny -layers 1 -t 16 -b 1 -x 1 -v 0 -s 0 -i '%s/c_train_*.bin' -j \"\"", dir);
    rc = rel_run_env("", flags);
    CHECKF(rc == 2 && strstr(cli_out, "did not finish"), "training on a killed -tokenize's shards: exit %d\n%s", rc, cli_out);
    snprintf(cmd, sizeof(cmd), "touch %s/c_train_000007.bin.tmp.4194305", dir); // (a pid above Linux's largest: no such process)
    CHECK(test_run_cmd(cmd, NULL, 0) == 0);
    snprintf(flags, sizeof(flags), "-tokenize %s -o %s/c -shard-tokens 1500 -val-every 0", text, dir);
    rc = rel_run_env("", flags);
    CHECKF(rc == 0 && strstr(cli_out, "removed 1 temporary file(s) a killed -tokenize"), "the -tokenize after a kill: exit %d\n%s", rc, cli_out);
    int shards = 0;
    const char* at = strstr(cli_out, " tokens in ");
    if (at) shards = atoi(at + 11);
    CHECKF(shards >= 4, "expected 4 or more shards, got %d:\n%s", shards, cli_out);
    snprintf(flags, sizeof(flags), "-e tiny -layers 1 -t 16 -b 1 -x 1 -v 0 -s 0 -i '%s/c_train_*.bin' -j \"\"", dir);
    rc = rel_run_env("", flags);
    CHECKF(rc == 0 && !strstr(cli_out, "missing between them"), "training on the finished -tokenize's shards: exit %d\n%s", rc, cli_out);
    // the record: a shard changed since (one id rewritten, still a valid one) is refused
    snprintf(cmd, sizeof(cmd), "%s/c.shards", dir);
    CHECKF(access(cmd, F_OK) == 0, "no record %s", cmd);
    snprintf(cmd, sizeof(cmd), "printf '\\007\\000' | dd of=%s/c_train_000002.bin bs=1 seek=1034 conv=notrunc 2>/dev/null", dir);
    CHECK(test_run_cmd(cmd, NULL, 0) == 0);
    rc = rel_run_env("", flags);
    CHECKF(rc == 2 && strstr(cli_out, "c_train_000002.bin: not the file -tokenize wrote"), "a changed shard: exit %d\n%s", rc, cli_out);
    snprintf(cmd, sizeof(cmd), "-tokenize %s -o %s/c -shard-tokens 1500 -val-every 0", text, dir);
    CHECK(rel_run_env("", cmd) == 0);
    snprintf(cmd, sizeof(cmd), "%s/c_train_000001.bin", dir);
    CHECK(unlink(cmd) == 0);
    rc = rel_run_env("", flags);
    CHECKF(rc == 0 && strstr(cli_out, "numbered 000000 and then 000002: 1 missing between them"), "a gap in the numbering: exit %d, expected a warning:\n%s", rc, cli_out);
    snprintf(flags, sizeof(flags), "-tokenize %s -o %s/c -shard-tokens 100000 -val-every 0", text, dir); // one shard now
    rc = rel_run_env("", flags);
    snprintf(cmd, sizeof(cmd), "ls %s | grep -c '^c_train_.*bin$'", dir);
    char n[64] = "";
    test_run_cmd(cmd, n, sizeof(n));
    CHECKF(rc == 0 && strstr(cli_out, "shard(s) or mask(s) an earlier -tokenize") && atoi(n) == 1, "a re-tokenize with fewer shards: exit %d, %d shard(s) left:\n%s", rc, atoi(n), cli_out);
    // JSONL: killed after its first shard, that shard has its mask
    snprintf(jsonl, sizeof(jsonl), "%s/pairs.jsonl", dir);
    f = fopen(jsonl, "w");
    for (int k = 0; k < 60; k++) fprintf(f, "{\"prompt\": \"Question %d: what came on day %d?\", \"completion\": \" The light, %d times.\"}\n", k, k, k);
    fclose(f);
    snprintf(flags, sizeof(flags), "-tokenize %s -o %s/p -t 16 -shard-tokens 64 -val-every 0", jsonl, dir);
    rc = rel_run_env("ZT_FAULT=crash:tokenize-shard:1", flags);
    snprintf(cmd, sizeof(cmd), "cd %s && ls p_train_*.bin && for s in p_train_*.bin; do [ -f $s.mask ] || exit 1; done", dir);
    CHECKF(rc == 128 + SIGKILL && test_run_cmd(cmd, NULL, 0) == 0, "JSONL killed after its first shard: exit %d; a shard without its mask, or none", rc);
}
