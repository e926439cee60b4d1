// tune.h — -tune: measure instead of estimate. The planner ranks the rows that fit with its headroom; the
// fastest -tune-rows of them that keep every flag given explicitly are each built, initialised from
// -seed, and run for one warm-up step and -tune-steps timed steps on the training data: scratch
// state, freed afterwards. Rank 0 picks the highest measured tokens/s among the candidates whose
// measured memory also leaves the headroom, and broadcasts it. The run is then built by the same
// code (trainer_build_model) from its own source (seed, -e file or checkpoint), exactly as if the
// chosen flags had been given: the same bits. The choice goes into every checkpoint's DONE marker
// as flags ("-z 2 -r 1"); a resume with -tune reuses it and never tunes again.
//
// Memory per candidate and rank: the tagged allocator's peak (g_mem_peak, reset before each build),
// and the process's: on the CPU device VmHWM, reset before each build by writing "5" to
// /proc/self/clear_refs (Linux sets VmHWM to VmRSS), so VmHWM minus the VmRSS of that moment is the
// candidate's growth; on CUDA the device memory in use after the steps beyond the context
// (cudaMemGetInfo: nothing is allocated inside a step, so that is the candidate's peak).
// Communication: on the CPU device the time the host waited in collectives (Comm.wait_s); on CUDA
// the host never waits for one, the compute stream does: while measuring (Comm.time_waits) comm_wait
// records an event on the compute stream just before and just after its cudaStreamWaitEvent on a
// collective (a ring of events created once with the communicator: nothing is allocated in a step),
// and the time between each pair, summed once the steps are done, is how long the stream stalled
// (plus, as on the CPU device, the host's waits in the scalar collectives: loss, norm, overflow).
//
// [offload] -offload is tuned like -z and -r, by the planner's rule (plan_choose): the candidates
// are the rows without offload that fit; only when none fits, the -offload cpu rows; only when none
// of those fits either (and -offload-dir is given), the nvme rows. Offload rows are not measured
// beside rows without offload that fit: on one device per rank an offload row runs the same
// kernels plus the copies and the host's AdamW, so it is slower by construction (its memory saving
// is what the headroom rule already granted the others), and measuring it would only let noise
// choose the run that also holds the optimizer state on the host. `-tune -offload cpu` measures the
// -z and -r of the offload rows for whoever wants the numbers.
//
// [-offload-params] is not tuned: given cpu or nvme, the candidates are that kind's rows (-z 3; -r and
// -offload as they allow); not given, none of them (the parameters stay on the device).
//
// -attn auto is tuned apart, before the rows (tune_attention): cuDNN's attention against ours.
//
// May call: flags.h (Flags, parse_int, FLAG_SHOW), ops/attention.cuh (op_attention_*, g_attn_cudnn), plan.h (plan_env, plan_rows, the planner's rules),
// startup.h (proc_status_bytes, peak_rss_bytes, json_num), checkpoint.h (ckpt_peek_tune), zero.h
// (Comm: broadcasts, sums, wait statistics) and, through TuneTrainer, the trainer's build, step and
// free. Knows nothing of the trainer's types.
#ifndef ZT_TUNE_H
#define ZT_TUNE_H
#include <fcntl.h>
#include <unistd.h>
#include "device.cuh"     // defines: g_device, g_mem_peak, mem_peak_reset, printf0, die_user
#include "flags.h"        // defines: Flags, parse_int, FLAG_SHOW
#include "plan.h"         // defines: PlanEnv, PlanRow, plan_env, plan_env_show, plan_rows, plan_offload_arg, plan_explain_misfit, fmt_bytes
#include "startup.h"      // defines: proc_status_bytes, peak_rss_bytes, json_num
#include "checkpoint.h"   // defines: ckpt_peek_tune
#include "zero.h"         // defines: Comm, Launch, comm_broadcast, comm_sum_doubles, comm_reset_stats, comm_collect_waits
#include "offload.h"      // defines: Offload, offload_name, offload_parse

// The flags -tune chooses, one row each: the flag, its Flags field, the PlanRow field holding a
// row's value, the largest value, how the Flags field holds it (TUNE_*_INT: the value itself, -1
// while auto; TUNE_*_OFFLOAD: its name, "auto" while auto), and the value of a recorded choice
// that lacks the flag (-1: such a record is invalid; -offload: records from before it was tuned
// mean none). While -tune works every value is an int, as in PlanRow; -1: auto. The candidates, the
// choice, the table, tune.jsonl, the checkpoint's record and the resume follow this table.
#define TUNE_DIMS(X)                                               \
    X("-z", zero_stage, stage, 3, INT, -1)                         \
    X("-r", recompute, recompute, 3, INT, -1)                      \
    X("-offload", offload, offload, OFFLOAD_NVME, OFFLOAD, OFFLOAD_NONE)
#define TUNE_GET_INT(f, field) ((f)->field)
#define TUNE_SET_INT(f, field, v) ((f)->field = (v))
#define TUNE_WORD_INT(v, buf) (snprintf(buf, sizeof(buf), "%d", v), buf)
#define TUNE_PARSE_INT(word, max) tune_parse_count(word, max)
#define TUNE_GET_OFFLOAD(f, field) (strcmp((f)->field, "auto") ? offload_parse((f)->field) : -1)
#define TUNE_SET_OFFLOAD(f, field, v) snprintf((f)->field, sizeof((f)->field), "%s", (v) < 0 ? "auto" : offload_name((Offload)(v)))
#define TUNE_WORD_OFFLOAD(v, buf) offload_name((Offload)(v))
#define TUNE_PARSE_OFFLOAD(word, max) offload_parse(word)
#define TUNE_MAX_ROWS 16
enum {
#define X(flag, field, row, max, kind, old) TD_##field,
    TUNE_DIMS(X)
#undef X
    TUNE_NDIMS
};

// "0".."max" -> its value; -1 for anything else.
static int tune_parse_count(const char* word, int max) {
    int v;
    return parse_int(word, &v) == 0 && v >= 0 && v <= max ? v : -1;
}

// With -tune, each tuned flag not given on the command line is auto (-z 0, -r 1 are defaults, not choices).
static void tune_mark_auto(Flags* f) {
#define X(flag, field, row, max, kind, old) \
    if (!f->field##_set) { TUNE_SET_##kind(f, field, -1); snprintf(f->field##_given, sizeof(f->field##_given), "auto"); }
    TUNE_DIMS(X)
#undef X
}

// A choice as flags: "-z 2 -r 1 -offload none".
static void tune_text(const Flags* f, char* out, size_t cap) {
    int n = 0;
    char buf[16];
    out[0] = 0;
#define X(flag, field, row, max, kind, old) \
    n += snprintf(out + n, cap - n, "%s%s %s", n ? " " : "", flag, TUNE_WORD_##kind(TUNE_GET_##kind(f, field), buf));
    TUNE_DIMS(X)
#undef X
    (void)buf;
    if (f->lora && strcmp(f->lora_base, "auto")) n += snprintf(out + n, cap - n, " -lora-base %s", !strcmp(f->lora_base, "replicated") ? "replicated" : "sharded"); // [LoRA] the row's base
}

// The word after `flag` in a choice's text ("-z 2 -r 1 -offload cpu") into word; -1 when absent.
static int tune_text_word(const char* text, const char* flag, char* word, size_t cap) {
    size_t n = strlen(flag);
    for (const char* p = text; (p = strstr(p, flag)) != NULL; p += n) {
        if ((p != text && p[-1] != ' ') || p[n] != ' ') continue;
        size_t len = strcspn(p + n + 1, " ");
        snprintf(word, cap, "%.*s", (int)(len < cap ? len : cap - 1), p + n + 1);
        return 0;
    }
    return -1;
}

// Every tuned flag's value in a recorded choice (v[TD_*]); a flag the record lacks takes the
// table's `old`. Returns the first flag that is invalid or missing, NULL when all are valid.
static const char* tune_record_values(const char* rec, int v[TUNE_NDIMS]) {
    char word[64];
#define X(flag, field, row, max, kind, old)                                                   \
    v[TD_##field] = tune_text_word(rec, flag, word, sizeof(word)) ? (old) : TUNE_PARSE_##kind(word, max); \
    if (v[TD_##field] < 0) return flag;
    TUNE_DIMS(X)
#undef X
    return NULL;
}

// [LoRA] A recorded choice's -lora-base: "replicated" or "sharded"; "" when the record has none (no
// LoRA, or a build before it was recorded: the run's default then); NULL when the word is invalid.
static const char* tune_record_base(const char* rec) {
    char word[64];
    if (tune_text_word(rec, "-lora-base", word, sizeof(word))) return "";
    return !strcmp(word, "replicated") ? "replicated" : !strcmp(word, "sharded") ? "sharded" : NULL;
}

// What every rank measures of one candidate (summed over ranks into an R x TM_COLS matrix).
enum { TM_SECONDS, TM_WAIT, TM_WAITS, TM_COLLS, TM_TAGGED, TM_HOST, TM_PROCESS, TM_BASE, TM_RESET, TM_COLS };

// The trainer as -tune sees it: train_gpt.cu fills this with its own functions, so that -tune builds,
// runs and frees candidates without knowing the trainer's types.
typedef struct {
    void* ctx;  // the trainer
    // build the model of shape c for (stage, recompute, offload), every tag checked against the planner, with
    // scratch state initialised from -seed as a new run's; returns the offload host bytes it holds
    size_t (*build)(void* ctx, const GPTConfig* c, int stage, int recompute, Offload offload);
    void (*step)(void* ctx);    // issue one training step
    void (*wait)(void* ctx);    // wait until the steps issued are done (their numbers read back)
    void (*release)(void* ctx); // free what build made; the trainer's step counters back to 0
    size_t mem_baseline;        // [CUDA] device memory in use after the context and communicator exist
} TuneTrainer;

// Build the candidate, run it on scratch state, measure, free it. mine: this rank's TM_COLS values.
// rep: [LoRA] the candidate's -lora-base (1 replicated: c's lora_rep for its build).
static void tune_measure(const Flags* f, Comm* comm, const TuneTrainer* t, const GPTConfig* c, const int v[TUNE_NDIMS], int rep, double* mine) {
    GPTConfig cr = *c;
    cr.lora_rep = c->lora_r && rep;
    int fd = open("/proc/self/clear_refs", O_WRONLY); // VmHWM := VmRSS (Linux >= 4.0)
    int reset = fd >= 0 && write(fd, "5", 1) == 1;
    if (fd >= 0) close(fd);
    mine[TM_BASE] = (double)proc_status_bytes("VmRSS");
    mem_peak_reset();
    size_t host_bytes = t->build(t->ctx, &cr, v[TD_zero_stage], v[TD_recompute], (Offload)v[TD_offload]); // scratch: as a new run, thrown away
    t->step(t->ctx); // warm-up: first touches, threads, cuBLASLt's choices
    t->wait(t->ctx);
    comm_reset_stats(comm);
    comm->time_waits = 1; // [CUDA] the compute stream's stalls on collectives, timed by events (comm_wait)
    double t0 = wall_s();
    for (int i = 0; i < f->tune_steps; i++) t->step(t->ctx);
    t->wait(t->ctx); // [one GPU] waits for the last step
    mine[TM_SECONDS] = wall_s() - t0;
    comm_collect_waits(comm); // [CUDA] the timed waits' events, summed
    comm->time_waits = 0;
    mine[TM_WAIT] = comm->wait_s;
    mine[TM_WAITS] = (double)comm->waits;
    mine[TM_COLLS] = (double)(comm->count[COLL_ALL_GATHER] + comm->count[COLL_REDUCE_SCATTER] + comm->count[COLL_ALL_REDUCE]);
    mine[TM_TAGGED] = (double)g_mem_peak;
    mine[TM_HOST] = (double)host_bytes; // [offload] what offload_init allocated (the build checked it against the planner)
    mine[TM_PROCESS] = (double)peak_rss_bytes();
    mine[TM_RESET] = reset;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        size_t free_b, total_b;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        mine[TM_PROCESS] = (double)(total_b - free_b) - (double)t->mem_baseline;
        mine[TM_BASE] = 0;
        mine[TM_RESET] = 1;
    }
#endif
    t->release(t->ctx);
    comm_reset_stats(comm);
}

// The planner's fastest rows that fit (its headroom rule, its rule against ZeRO-0 with R > 1, and
// its order of the places of the optimizer state: the first of none, cpu, nvme that -offload allows
// and that has a row that fits) and keep every flag not at auto: up to k row indices into idx,
// fastest first (ties: table order).
// [-offload-params] given (cpu or nvme: not a tuned flag): its rows only, the state's place among them
// as -offload allows; not given: never its rows (-z auto may still choose one when nothing else fits).
static int tune_candidates(const PlanRow* rows, int n, const Flags* f, int R, int k, int* idx) {
    int got = 0, kinds = plan_offload_arg(f), params = plan_params_arg(f);
    for (int pass = OFFLOAD_NONE; pass <= OFFLOAD_NVME && got == 0; pass++) {
        if (!(kinds & (1 << pass))) continue;
        if (params > 0 && pass == OFFLOAD_NONE) continue; // (the parameter rows offload the state too)
        while (got < k) {
            int best = -1;
            for (int i = 0; i < n; i++) {
                const PlanRow* p = &rows[i];
                int keep = p->offload == pass && p->offload_params == params && p->fits && !(R > 1 && p->stage == 0 && f->zero_stage != 0);
#define X(flag, field, row, max, kind, old) if (TUNE_GET_##kind(f, field) >= 0 && p->row != TUNE_GET_##kind(f, field)) keep = 0;
                TUNE_DIMS(X)
#undef X
                if (plan_base_arg(f) >= 0 && p->rep_base != plan_base_arg(f)) keep = 0; // [LoRA] -lora-base given
                for (int j = 0; j < got; j++) keep = keep && idx[j] != i;
                if (keep && (best < 0 || p->step_s < rows[best].step_s)) best = i;
            }
            if (best < 0) break;
            idx[got++] = best;
        }
    }
    return got;
}

// A resume with -tune: the choice its checkpoint records, for every flag still at auto. Returns 1
// when there was one (nothing is measured then).
static int tune_reuse(Flags* f, Comm* comm, char* choice, size_t cap) {
    char rec[128] = "";
    int step = -1;
    if (comm->r == 0) step = ckpt_peek_tune(f->out_dir, f->resume_step, rec, sizeof(rec));
    comm_broadcast(comm, &step, sizeof(step), 0);
    comm_broadcast(comm, rec, sizeof(rec), 0);
    if (step < 0) return 0; // nothing to resume: a new run, tuned
    if (!rec[0]) {
        printf0("tune: the checkpoint of step %d records no -tune choice (its run did not tune, or an older build wrote it): tuning now\n", step);
        return 0;
    }
    int v[TUNE_NDIMS];
    const char* bad = tune_record_values(rec, v), *base = tune_record_base(rec);
    if (!bad && !base) bad = "-lora-base";
    if (bad) die_user("resume: DONE_%08d in %s records the -tune choice '%s', which has no valid %s. HINT: give the flags yourself, or -resume-step another checkpoint",
                      step, f->out_dir, rec, bad);
    char b1[16], b2[16];
#define X(flag, field, row, max, kind, old)                                                                                   \
    if (TUNE_GET_##kind(f, field) < 0) {                                                                                      \
        TUNE_SET_##kind(f, field, v[TD_##field]);                                                                            \
        FLAG_SHOW(f, field, "%s (-tune: the checkpoint's choice)", TUNE_WORD_##kind(v[TD_##field], b1));                      \
    } else if (TUNE_GET_##kind(f, field) != v[TD_##field])                                                                    \
        printf0("tune: %s %s given: kept (the checkpoint's choice was %s %s)\n", flag, TUNE_WORD_##kind(TUNE_GET_##kind(f, field), b1), \
                flag, TUNE_WORD_##kind(v[TD_##field], b2));
    TUNE_DIMS(X)
#undef X
    (void)b1; (void)b2;
    if (base[0] && !strcmp(f->lora_base, "auto")) // [LoRA] the chosen row's base
        plan_lora_base_resolve(f, !strcmp(base, "replicated"), f->zero_stage, "-tune: the checkpoint's choice");
    else if (f->lora && base[0] && strcmp(f->lora_base, base))
        printf0("tune: -lora-base %s given: kept (the checkpoint's choice was -lora-base %s)\n", f->lora_base, base);
    if (offload_parse(f->offload) == OFFLOAD_NVME && !f->offload_dir[0])
        die_user("resume: the checkpoint's -tune choice is -offload nvme, which needs -offload-dir DIR (where the state's files go). "
                 "HINT: add -offload-dir, or give -offload cpu or none");
    tune_text(f, choice, cap);
    printf0("tune: resuming step %d, whose checkpoint records -tune's choice %s: reused, not tuned again (running %s)\n", step, rec, choice);
    return 1;
}

// A resume without -tune of a checkpoint whose run tuned: its flags are this command line's (the
// defaults where not given), and one line says what the record holds and how to reuse it.
static void tune_note_record(const Flags* f, int r) {
    char rec[128] = "", mine[128];
    if (r == 0 && ckpt_peek_tune(f->out_dir, f->resume_step, rec, sizeof(rec)) >= 0 && rec[0]) {
        tune_text(f, mine, sizeof(mine));
        int v[TUNE_NDIMS], same = tune_record_values(rec, v) == NULL; // (a record without -offload: none)
#define X(flag, field, row, max, kind, old) same = same && TUNE_GET_##kind(f, field) == v[TD_##field];
        TUNE_DIMS(X)
#undef X
        const char* base = tune_record_base(rec); // [LoRA] (this run's auto resolves later: compared only when given)
        same = same && base && (!f->lora || !base[0] || !strcmp(f->lora_base, "auto") || !strcmp(f->lora_base, base));
        if (!same)
            printf0("note: the checkpoint records -tune's choice %s; this run has %s (without -tune a resume uses the flags as given). "
                    "HINT: add -tune to reuse the choice\n", rec, mine);
    }
}

// -tune: choose every flag at auto by measuring (see the banner above). Every rank takes part;
// rank 0 plans, decides and broadcasts. GA: the run's accumulation; t: builds and runs a candidate;
// choice (cap bytes): the choice as flags ("-z 2 -r 1 -offload none"), for the checkpoints.
static void tune_config(Flags* f, const GPTConfig* c, int GA, Comm* comm, const Launch* L, const TuneTrainer* t, char* choice, size_t cap,
                        char** jsonl, size_t* jsonl_len) {
    int autos = 0;
    char names[64] = "";
#define X(flag, field, row, max, kind, old) \
    autos += TUNE_GET_##kind(f, field) < 0; \
    snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", names[0] ? ", " : "", flag);
    TUNE_DIMS(X)
#undef X
    if (autos == 0) {
        printf0("tune: every flag -tune chooses was given (%s): nothing to tune\n", names);
        FLAG_SHOW(f, tune, "unused: %s were given", names);
    }
    if (autos == 0 || (f->resume && tune_reuse(f, comm, choice, cap))) { // the planner's inputs: nothing plans this run
        const char* why = autos ? "unused: -tune reused the checkpoint's choice" : "unused: -tune had nothing to choose";
        plan_inputs_unused(f, why);
        return;
    }
    // the candidates: rank 0 plans (its memory, as -z auto) and broadcasts them
    int64_t step_tokens = (int64_t)GA * comm->R * f->B * f->T;
    PlanEnv e;
    PlanRow rows[PLAN_MAX_ROWS];
    int idx[TUNE_MAX_ROWS], n = 0, nrows = 0;
    int cand[TUNE_MAX_ROWS][TUNE_NDIMS]; // each candidate's value of every tuned flag
    int cand_rep[TUNE_MAX_ROWS] = {0};   // [LoRA] each candidate's -lora-base (1: replicated; the rows' rep_base)
    char why[1024] = "";
    if (comm->r == 0) {
        plan_env(f, L, comm->R, &e);
        plan_env_show(f, &e);
        nrows = plan_rows(c, f->B, f->T, flags_groups(f, L, comm->R), GA, L->local_world, &e, rows, 0); // (the layout given: -tune does not choose one)
        n = tune_candidates(rows, nrows, f, comm->R, f->tune_rows, idx);
        for (int i = 0; i < n; i++) {
#define X(flag, field, row, max, kind, old) cand[i][TD_##field] = rows[idx[i]].row;
            TUNE_DIMS(X)
#undef X
            cand_rep[i] = rows[idx[i]].rep_base;
        }
        if (n == 0) plan_explain_misfit(c, f->B, f->T, comm->R, GA, &e, why, sizeof(why));
    }
    comm_broadcast(comm, &n, sizeof(n), 0);
    comm_broadcast(comm, cand, sizeof(cand), 0);
    comm_broadcast(comm, cand_rep, sizeof(cand_rep), 0);
    if (n == 0) die_user("-tune: %s", comm->r == 0 ? why : "rank 0 found no configuration that fits (see its message)");
    if (plan_params_arg(f) > 0) // [-offload-params] given: its rows
        printf0("tune: -offload-params %s given: the candidates are its rows (ZeRO-3, the optimizer state off the device too)\n", f->offload_params);
    else if (cand[0][TD_offload] != OFFLOAD_NONE && !strcmp(f->offload_given, "auto")) // [offload] the planner's order (see the banner)
        printf0("tune: nothing fits without offload%s: the candidates are -offload %s rows\n",
                cand[0][TD_offload] == OFFLOAD_NVME ? " nor with the state in host memory" : "", offload_name((Offload)cand[0][TD_offload]));
    printf0("tune: measuring %d candidate(s), the planner's fastest rows that fit %s per rank with the headroom %s: 1 warm-up + %d timed "
            "step(s) each, on scratch state (initialised from -seed, freed afterwards) ...\n", n, comm->r == 0 ? fmt_bytes(e.mem).s : "",
            comm->r == 0 ? fmt_bytes(e.headroom).s : "", f->tune_steps);
    printf0("tune: | -z%s | -r | -offload | est s/step | est tok/s |     tok/s |  ms/step | comm wait ms/step | tagged peak | process peak | fits |\n", c->lora_r ? " " : "");
    int trace = comm->trace, data_trace = f->data_trace;
    comm->trace = 0; f->data_trace = 0; // the tuning steps' collectives and batches are not the run's
    double* meas = (double*)calloc((size_t)n * comm->R * TM_COLS, sizeof(double));
    double tok_s[TUNE_MAX_ROWS], foot[TUNE_MAX_ROWS];
    int fits[TUNE_MAX_ROWS], best = -1;
    const char* process_kind = g_device == DEV_CUDA ? "device" : "vmhwm";
    for (int i = 0; i < n; i++) {
        double* all = meas + (size_t)i * comm->R * TM_COLS;
        tune_measure(f, comm, t, c, cand[i], cand_rep[i], all + comm->r * TM_COLS);
        comm_sum_doubles(comm, all, comm->R * TM_COLS);
        double secs = 0, wait = 0, tagged = 0, process = 0;
        foot[i] = 0;
        for (int r = 0; r < comm->R; r++) { // the slowest rank, the largest footprint
            const double* v = all + r * TM_COLS;
            double grow = v[TM_RESET] ? v[TM_PROCESS] - v[TM_BASE] : 0; // VmHWM not reset: only the tagged bytes count
            double host = g_device == DEV_CPU ? v[TM_HOST] : 0;         // [offload] on the CPU device the host is the same memory
            secs = fmax(secs, v[TM_SECONDS]); wait = fmax(wait, v[TM_WAIT]);
            tagged = fmax(tagged, v[TM_TAGGED]); process = fmax(process, v[TM_PROCESS]);
            foot[i] = fmax(foot[i], fmax(v[TM_TAGGED] + host, grow));
            if (!v[TM_RESET]) process_kind = "vmhwm_since_start";
        }
        tok_s[i] = (double)step_tokens * f->tune_steps / fmax(secs, 1e-9);
        if (comm->r == 0) {
            const PlanRow* p = &rows[idx[i]];
            fits[i] = foot[i] + e.headroom <= e.mem;
            char waitc[32];
            snprintf(waitc, sizeof(waitc), "%.2f", 1000.0 * wait / f->tune_steps);
            printf0("tune: | %2d%s | %2d | %-8s | %10.3g | %9.0f | %9.0f | %8.2f | %17s | %11s | %12s | %-4s |\n", p->stage, !c->lora_r ? "" : p->stage == 3 && p->rep_base ? "b" : " ",
                    p->recompute, offload_name((Offload)p->offload), p->step_s,
                    (double)step_tokens / p->step_s, tok_s[i], 1000.0 * secs / f->tune_steps, waitc, fmt_bytes(tagged).s, fmt_bytes(process).s,
                    fits[i] ? "yes" : "no");
            if (fits[i] && (best < 0 || tok_s[i] > tok_s[best])) best = i;
        }
    }
    comm->trace = trace; f->data_trace = data_trace;
    if (c->lora_r) printf0("tune: -z 3b: [LoRA] ZeRO-3 with -lora-base replicated (the whole frozen base on every rank, never gathered)\n");
    printf0("tune: est: the planner's estimate; tok/s, ms/step: the slowest rank; comm wait: %s; tagged peak: "
            "the allocator's; process peak: %s; fits: the larger of the tagged peak%s and the process's growth, plus the headroom, within "
            "the memory\n", g_device == DEV_CUDA ? "the compute stream's stalls on block collectives (events around each wait) and the host's waits in scalar ones, the largest rank's"
                                                  : "the host's time in collectives, the largest rank's",
            g_device == DEV_CUDA ? "device memory in use beyond the context (cudaMemGetInfo)"
                           : !strcmp(process_kind, "vmhwm") ? "VmHWM, reset per candidate (/proc/self/clear_refs)"
                                                            : "VmHWM since start (clear_refs failed: only the tagged peak counts)",
            g_device == DEV_CPU ? " (plus an offload row's host bytes: on the CPU device the same memory)" : "");
    // rank 0 decides; tune.jsonl (-o) keeps every candidate's numbers: its lines go to *jsonl (the
    // caller writes them into -o when the run commits to it, before its first step: a run that fails
    // before that leaves -o as it found it)
    comm_broadcast(comm, &best, sizeof(best), 0);
    if (comm->r == 0 && f->out_dir[0]) {
        FILE* fp = open_memstream(jsonl, jsonl_len);
        if (!fp) die(1, "-tune: cannot open a memory stream: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            const PlanRow* p = &rows[idx[i]];
            const double* all = meas + (size_t)i * comm->R * TM_COLS;
            double secs = 0, wait = 0;
            for (int r = 0; r < comm->R; r++) { secs = fmax(secs, all[r * TM_COLS + TM_SECONDS]); wait = fmax(wait, all[r * TM_COLS + TM_WAIT]); }
            fprintf(fp, "{\"stage\": %d, \"recompute\": %d, \"offload\": %d, \"R\": %d, \"GA\": %d, \"steps\": %d, \"est_step_s\": %.6g, "
                    "\"est_tok_s\": %.6g, \"planned_bytes\": %zu, \"planned_host_bytes\": %zu, \"tok_s\": %.6g, \"step_ms\": %.6g",
                    p->stage, p->recompute, p->offload, comm->R, GA, f->tune_steps, p->step_s, (double)step_tokens / p->step_s, p->total,
                    p->host_bytes, tok_s[i], 1000.0 * secs / f->tune_steps);
            json_num(fp, "comm_wait_ms", 1000.0 * wait / f->tune_steps); // [CUDA] the compute stream's stalls
            const char* keys[5] = {"comm_waits", "block_collectives", "tagged_peak", "process_peak", "rss_before"}; // per rank
            const int cols[5] = {TM_WAITS, TM_COLLS, TM_TAGGED, TM_PROCESS, TM_BASE};
            for (int k = 0; k < 5; k++) {
                fprintf(fp, ", \"%s\": [", keys[k]);
                for (int r = 0; r < comm->R; r++) fprintf(fp, "%s%.0f", r ? ", " : "", all[r * TM_COLS + cols[k]]);
                fprintf(fp, "]");
            }
            fprintf(fp, ", \"process_kind\": \"%s\", \"footprint\": %.0f, \"mem\": %.0f, \"headroom\": %.0f, \"fits\": %d, \"chosen\": %d}\n",
                    process_kind, foot[i], e.mem, e.headroom, fits[i], i == best);
        }
        if (fclose(fp) != 0) die(1, "-tune: writing tune.jsonl's lines in memory failed: %s", strerror(errno));
    }
    free(meas);
    if (best < 0) die_user("-tune: none of the %d candidate(s) leaves the headroom once measured (see the table). HINT: -plan, a smaller -b, or more ranks", n);
    char word[16];
#define X(flag, field, row, max, kind, old)                                                                  \
    TUNE_SET_##kind(f, field, cand[best][TD_##field]);                                                      \
    if (!strcmp(f->field##_given, "auto")) FLAG_SHOW(f, field, "%s (-tune: the fastest measured)", TUNE_WORD_##kind(cand[best][TD_##field], word));
    TUNE_DIMS(X)
#undef X
    (void)word;
    plan_lora_base_resolve(f, cand_rep[best], cand[best][TD_zero_stage], "-tune: the fastest measured"); // [LoRA] the measured row's base
    tune_text(f, choice, cap);
    if (comm->r == 0) {
        const PlanRow* p = &rows[idx[best]];
        printf0("tune: chose %s: %.0f tok/s measured, the fastest of the %d candidate(s) that fit (the planner estimated %.0f tok/s); "
                "the run starts from its source as if started with %s\n", choice, tok_s[best], n, (double)step_tokens / p->step_s, choice); // ([LoRA] choice holds -lora-base)
    }
}

// -tune with -attn auto where cuDNN can run (a USE_CUDNN=1 build on the CUDA device, libcudnn.so.9
// loaded): the attention of the run's shape (B, T, the model's heads; forward then backward, as a
// step runs them per layer) timed with cuDNN and with our kernels on scratch inputs, one warm-up and
// -tune-steps timed repetitions each (CUDA events on the compute stream); rank 0's faster one is
// every rank's (broadcast). Runs before the rows are measured, so they run with the chosen attention.
// The scratch (qkv, out, lse, dout, dqkv and the larger of the two workspaces) is allocated and freed here, before
// the model exists. A cuDNN that refuses the shape (the dispatcher's note) leaves ours.
static void tune_attention(Flags* f, const GPTConfig* c, Comm* comm) {
#if defined(__CUDACC__) && defined(ZT_CUDNN) && !defined(ENABLE_FP32) && !defined(ZT_CUDA_EMU)
    if (g_device != DEV_CUDA || !g_attn_cudnn || g_attn_cudnn_given) return;
    ModelDims dm = model_dims(c);
    int B = f->B, T = f->T, NH = c->NH, NKV = dm.NKV, HS = dm.HD;
    int64_t nqkv = (int64_t)B * T * dm.QKV, nout = (int64_t)B * T * NH * HS, nlse = (int64_t)B * NH * T;
    size_t ws = (size_t)ceil_div((int64_t)attention_cudnn_workspace_bytes(B, T, NH, NKV, HS), sizeof(float)); // cuDNN's, or ours:
    if (attention_workspace_floats(B, T, NH, NKV, HS) > ws) ws = attention_workspace_floats(B, T, NH, NKV, HS); // D and a split dK/dV's parts
    floatX* qkv = (floatX*)dev_alloc(TAG_WORK, nqkv * sizeof(floatX));
    floatX* dqkv = (floatX*)dev_alloc(TAG_WORK, nqkv * sizeof(floatX));
    floatX* out = (floatX*)dev_alloc(TAG_WORK, nout * sizeof(floatX));
    floatX* dout = (floatX*)dev_alloc(TAG_WORK, nout * sizeof(floatX));
    float* lse = (float*)dev_alloc(TAG_WORK, nlse * sizeof(float));
    float* work = (float*)dev_alloc(TAG_WORK, ws * sizeof(float));
    dev_fill_u16(qkv, 0x3c00, nqkv);  // BF16 0.0078125: every score equal, a finite softmax (the times do not depend on the values)
    dev_fill_u16(dout, 0x3c00, nout);
    float* saved_work = g_work;
    size_t saved_floats = g_work_floats;
    g_work = work;
    g_work_floats = ws;
    cudaEvent_t ev[2];
    cudaCheck(cudaEventCreate(&ev[0]));
    cudaCheck(cudaEventCreate(&ev[1]));
    double ms[2] = {0, 0}; // [0] ours, [1] cuDNN
    for (int k = 0; k < 2; k++) {
        g_attn_cudnn = k;
        for (int rep = 0; rep <= f->tune_steps; rep++) { // rep 0: the warm-up (cuDNN builds its graphs there)
            if (rep == 1) cudaCheck(cudaEventRecord(ev[0], g_stream));
            op_attention_forward(out, lse, qkv, NULL, B, T, NH, NKV, HS);
            op_attention_backward(dqkv, dout, qkv, out, lse, NULL, B, T, NH, NKV, HS);
        }
        cudaCheck(cudaEventRecord(ev[1], g_stream));
        cudaCheck(cudaEventSynchronize(ev[1]));
        float t = 0.0f;
        cudaCheck(cudaEventElapsedTime(&t, ev[0], ev[1]));
        ms[k] = t / f->tune_steps;
    }
    int pick = ms[1] < ms[0];
    comm_broadcast(comm, &pick, sizeof(pick), 0);
    g_attn_cudnn = pick;
    printf0("tune: attention forward + backward at B %d, T %d: cuDNN %.3f ms, ours %.3f ms (rank 0): %s\n", B, T, ms[1], ms[0], pick ? "cudnn" : "own");
    FLAG_SHOW(f, attn, "%s (-tune: cudnn %.2f ms, own %.2f ms)", pick ? "cudnn" : "own", ms[1], ms[0]);
    cudaCheck(cudaEventDestroy(ev[0]));
    cudaCheck(cudaEventDestroy(ev[1]));
    g_work = saved_work;
    g_work_floats = saved_floats;
    dev_free(TAG_WORK, work, ws * sizeof(float));
    dev_free(TAG_WORK, lse, nlse * sizeof(float));
    dev_free(TAG_WORK, dout, nout * sizeof(floatX));
    dev_free(TAG_WORK, out, nout * sizeof(floatX));
    dev_free(TAG_WORK, dqkv, nqkv * sizeof(floatX));
    dev_free(TAG_WORK, qkv, nqkv * sizeof(floatX));
#else
    (void)f; (void)c; (void)comm;
#endif
}

#endif // ZT_TUNE_H
