// run_record.h — what a checkpoint records of its run, and what a resume does with it. Every
// checkpoint records the resolved value of each FLAG_RUN and FLAG_KEEP flag (flags.h's table) and
// what each data glob matched ("shards-i", "shards-j": the shards' count, tokens, masks and a hash
// of their paths and sizes), as "KEY VALUE" lines checkpoint.h keeps in DONE. A resume (-y 1) takes
// every recorded flag not given from the checkpoint it resumes — the settings table says
// "(from checkpoint)" — and refuses a FLAG_RUN flag given with another value, or data whose shard
// list changed, naming the flag and both values, unless -resume-change names that flag (FLAG_KEEP
// flags change freely). A checkpoint written before the record existed records nothing: nothing
// is taken or checked (said). docs/resume.md has the whole story.
//
// May call: flags.h (the table, Flags), checkpoint.h (ckpt_run_add, ckpt_run_find, CKPT_RUN_MAX),
// dataloader.h (DataLoader) and device.cuh (die_user, printf0; fnv1a from rng.h, which it includes). Takes nothing of the trainer's.
// defines: flags_check_resume_change, flags_take_recorded, run_record_build, run_record_check, run_record_set_choice
#ifndef ZT_RUN_RECORD_H
#define ZT_RUN_RECORD_H
#include "device.cuh"     // defines: die_user, printf0 (and includes rng.h: fnv1a, FNV_INIT)
#include "flags.h"        // defines: FLAG_TABLE, Flags, FlagKind, parse_int, parse_float
#include "checkpoint.h"   // defines: ckpt_run_add, ckpt_run_find, CKPT_RUN_MAX
#include "dataloader.h"   // defines: DataLoader, dataloader_total_tokens

// Is `flag` in a list like "-i,-l" or "-i -l"?
static int flag_listed(const char* list, const char* flag) {
    size_t n = strlen(flag);
    for (const char* p = list; *p;) {
        p += strspn(p, ", ");
        size_t k = strcspn(p, ", ");
        if (k == n && !strncmp(p, flag, n)) return 1;
        p += k;
    }
    return 0;
}

// Two texts of a flag's value the same? Numbers as numbers ("1e-3" = "0.001").
static int flag_values_equal(FlagType type, const char* a, const char* b) {
    if (!strcmp(a, b)) return 1;
    float x, y;
    if (type == F_FLOAT && !parse_float(a, &x) && !parse_float(b, &y)) return x == y;
    int i, j;
    if (type == F_INT && !parse_int(a, &i) && !parse_int(b, &j)) return i == j;
    return 0;
}

// -resume-change names FLAG_RUN flags only (the others change freely anyway).
static void flags_check_resume_change(const Flags* f) {
    for (const char* p = f->resume_change_str; *p;) {
        p += strspn(p, ", ");
        size_t k = strcspn(p, ", ");
        if (!k) break;
        int run = -1;
#define X(flag, field, type, def, kind, help) if (k == strlen(flag) && !strncmp(p, flag, k)) run = kind == FLAG_RUN;
        FLAG_TABLE(X)
#undef X
        if (run < 0) die_user("flag -resume-change: '%.*s' is not a flag. HINT: ./train -help", (int)k, p);
        if (!run) die_user("flag -resume-change: %.*s does not define the run (a resume may change it freely): leave it out", (int)k, p);
        p += k;
    }
    if (f->resume_change_str[0] && strcmp(f->resume_str, "1")) die_user("flag -resume-change is for a resume: it needs -y 1");
}

// Before defaults are resolved: every FLAG_RUN and FLAG_KEEP flag not given takes the value `run`
// records (the checkpoint of `step`).
static void flags_take_recorded(Flags* f, const char* run, int step) {
    char v[1024], taken[512] = "";
    int n = 0;
#define X(flag, field, type, def, kind, help)                                                            \
    if (kind != FLAG_FREE && !f->field##_set && ckpt_run_find(run, flag, v, sizeof(v))) {               \
        snprintf(f->field##_str, sizeof(f->field##_str), "%s", v);                                       \
        snprintf(f->field##_given, sizeof(f->field##_given), "(from checkpoint)");                       \
        size_t t = strlen(taken);                                                                         \
        if (t + strlen(flag) + 3 < sizeof(taken)) snprintf(taken + t, sizeof(taken) - t, "%s%s", n ? " " : "", flag); \
        n++;                                                                                              \
    }
    FLAG_TABLE(X)
#undef X
    if (!run[0]) printf0("resume: the checkpoint of step %d records no run flags (written by an older build): nothing is taken from it or checked against it\n", step);
    else if (n) printf0("resume: %d flag(s) not given taken from the checkpoint of step %d: %s (the settings table says \"(from checkpoint)\")\n", n, step, taken);
}

// Once every flag is resolved: a given FLAG_RUN flag whose value differs from the record is refused
// (exit 2) unless -resume-change names it; said when it does. A given FLAG_KEEP flag that differs is
// said in one line (-z 3 after a run at -z 2: the memory per rank changes).
static void flags_check_recorded(const Flags* f, const char* run, int step) {
    char v[1024];
#define X(flag, field, type, def, kind, help)                                                                          \
    if (kind == FLAG_RUN && f->field##_set && ckpt_run_find(run, flag, v, sizeof(v)) && !flag_values_equal(type, f->field##_str, v)) { \
        if (!flag_listed(f->resume_change, flag))                                                                       \
            die_user("flag %s: this run gives '%s', the checkpoint of step %d was trained with '%s'. HINT: leave %s out to take the " \
                     "checkpoint's value, or name the change: -resume-change %s", flag, f->field##_str, step, v, flag, flag); \
        printf0("resume: %s changed on purpose (-resume-change): '%s', the checkpoint of step %d: '%s'\n", flag, f->field##_str, step, v); \
    }                                                                                                  \
    else if (kind == FLAG_KEEP && f->field##_set && ckpt_run_find(run, flag, v, sizeof(v)) && !flag_values_equal(type, f->field##_str, v)) \
        printf0("resume: %s %s given, the checkpoint of step %d ran %s %s\n", flag, f->field##_str, step, flag, v);
    FLAG_TABLE(X)
#undef X
}

// The record of this run: every FLAG_RUN and FLAG_KEEP flag's resolved value. -1 when it does not fit.
static int flags_run_record(const Flags* f, char* out, size_t cap) {
    out[0] = 0;
    int bad = 0;
#define X(flag, field, type, def, kind, help) if (kind != FLAG_FREE) bad |= ckpt_run_add(out, cap, flag, f->field##_str);
    FLAG_TABLE(X)
#undef X
    return bad ? -1 : 0;
}

// The run's -z, -r and -offload as it runs them (given, planned by -z auto or chosen by -tune),
// replacing what run_record_build recorded of them: a resume that gives none runs the same.
static void run_record_set_choice(char* run, const Flags* f) {
    if (!run[0]) return;
    const char* keys[6] = {"-z", "-r", "-offload", "-offload-params", "-shard-group", "-hpz"};
    char vals[6][64];
    snprintf(vals[0], sizeof(vals[0]), "%d", f->zero_stage);
    snprintf(vals[1], sizeof(vals[1]), "%d", f->recompute);
    snprintf(vals[2], sizeof(vals[2]), "%.60s", f->offload);
    snprintf(vals[3], sizeof(vals[3]), "%.60s", f->offload_params);
    snprintf(vals[4], sizeof(vals[4]), "%.60s", f->shard_group); // [groups] -z auto's layout: its N
    snprintf(vals[5], sizeof(vals[5]), "%.60s", f->hpz);
    for (int k = 0; k < 6; k++) {
        size_t kl = strlen(keys[k]);
        for (char* line = run; *line;) { // remove the key's line
            char* nl = strchr(line, '\n');
            char* next = nl ? nl + 1 : line + strlen(line);
            if (!strncmp(line, keys[k], kl) && line[kl] == ' ') { memmove(line, next, strlen(next) + 1); continue; }
            line = next;
        }
        if (ckpt_run_add(run, CKPT_RUN_MAX, keys[k], vals[k])) {
            printf0("warning: the run's flags are longer than a checkpoint records (%d bytes): its checkpoints record none\n", CKPT_RUN_MAX);
            run[0] = 0;
            return;
        }
    }
}

// What a data glob matched, for the run's record: the shards (paths, token counts, masks) hashed.
static void shards_text(const DataLoader* dl, char* out, size_t cap) {
    uint64_t h = FNV_INIT;
    for (int i = 0; i < dl->nshards; i++) {
        const DataShard* sh = &dl->shards[i];
        int mask = sh->mask_fd >= 0;
        h = fnv1a(h, sh->path, strlen(sh->path) + 1);
        h = fnv1a(h, &sh->ntok, sizeof(sh->ntok));
        h = fnv1a(h, &mask, sizeof(mask));
        h = fnv1a(h, &sh->mask_counted, sizeof(sh->mask_counted));
    }
    snprintf(out, cap, "%d shard(s), %lld tokens, %s, fnv1a %016llx", dl->nshards, (long long)dataloader_total_tokens(dl),
             dl->has_mask ? "loss masks" : "no masks", (unsigned long long)h);
}

// This run's record into out (CKPT_RUN_MAX bytes): the recorded flags' resolved values, what
// -i and -j (val may be NULL: none) matched and the classifier's chunk rows (ops/classifier.cuh:
// they group the head weight's gradient sums, so a resume must run with the same). "" (said) when
// it does not fit.
static void run_record_build(const Flags* f, const DataLoader* train, const DataLoader* val, int chunk, char* out) {
    char now[256];
    int bad = flags_run_record(f, out, CKPT_RUN_MAX);
    snprintf(now, sizeof(now), "%d", chunk);
    bad = bad || ckpt_run_add(out, CKPT_RUN_MAX, "classifier-chunk", now);
    shards_text(train, now, sizeof(now));
    bad = bad || ckpt_run_add(out, CKPT_RUN_MAX, "shards-i", now);
    if (val) shards_text(val, now, sizeof(now));
    bad = bad || (val && ckpt_run_add(out, CKPT_RUN_MAX, "shards-j", now));
    if (bad) {
        printf0("warning: the run's flags are longer than a checkpoint records (%d bytes): its checkpoints record none\n", CKPT_RUN_MAX);
        out[0] = 0;
    }
}

// A resume, once every flag is resolved and the data is open: the flags given and the data
// against the record of the checkpoint of `step` (exit 2 on a difference -resume-change does not
// name; said when it does). The classifier's chunk rows (chunk: this build's for the model) must
// be the record's: another chunk groups the head's gradient sums otherwise, and the resumed run
// would not be the run continued (no flag changes it: only a build with another rule can differ).
// A record without it (a build before the chunked classifier) ran the head unchunked: the same
// bits when one chunk holds the micro-batch (rows: B * T), else refused too.
static void run_record_check(const Flags* f, const DataLoader* train, const DataLoader* val, int chunk, int rows,
                             const char* recorded, int step) {
    char now[256], then[256];
    flags_check_recorded(f, recorded, step);
    if (recorded[0]) {
        int had = ckpt_run_find(recorded, "classifier-chunk", then, sizeof(then));
        snprintf(now, sizeof(now), "%d", chunk);
        if (had ? strcmp(then, now) != 0 : rows > chunk)
            die_user("resume: the checkpoint of step %d was trained with the classifier in chunks of %s rows, this build runs it in "
                     "chunks of %d (B*T = %d rows): the head's gradient sums would be grouped differently. HINT: resume with the "
                     "build that wrote it, or start a new run from the model (-e with -save-model's file)", step,
                     had ? then : "all B*T (unchunked)", chunk, rows);
    }
    for (int k = 0; k < 1 + (val != NULL); k++) {
        const char* flag = k ? "-j" : "-i";
        shards_text(k ? val : train, now, sizeof(now));
        if (!ckpt_run_find(recorded, k ? "shards-j" : "shards-i", then, sizeof(then)) || !strcmp(then, now)) continue;
        if (!flag_listed(f->resume_change, flag))
            die_user("flag %s '%s': its files differ from those the checkpoint of step %d was trained on (then: %s; now: %s). HINT: "
                     "restore the data, or name the change: -resume-change %s", flag, k ? f->val_data : f->train_data, step, then, now, flag);
        printf0("resume: %s's files changed on purpose (-resume-change): then %s; now %s\n", flag, then, now);
    }
}

#endif // ZT_RUN_RECORD_H
