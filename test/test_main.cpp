// test/test_main.cpp — the test program: includes the trainer, registers every test, runs them.
//
//   test/test_bf16 [filter]          run the tests whose name contains filter (all by default)
//   test/test_bf16 --train [flags]   be the trainer (./train), e.g. under mpirun for ZeRO tests
//   test/test_bf16 --bench-adamw     make bench's host AdamW against memcpy (test/bench_adamw.h)
//   test/test_fp32 --bench-gemm      make bench's CPU GEMM per path against the FMA peak (test/bench_gemm.h)
//   test/test_bf16 --simd            the SIMD path the host loops take here and those this CPU has (make bench's header)
//   test/test_bf16 --train-unchunked [flags]  the trainer with the classifier in one chunk of all B*T
//                                    rows (the head before ops/classifier.cuh chunked it): make bench's "before"
// Built twice by the Makefile: test_bf16 (BF16 storage) and test_fp32 (FP32, tight tolerances).
#ifndef TESTING
#define TESTING
#endif
#include "../train_gpt.cu"   // defines: the whole trainer; train_main instead of main
#include "test.h"            // defines: TEST, CHECK, test_run_all
#include "fixture.h"         // defines: Fixture, fixture_load, fixture_get
#include "test_data.h"       // tests: dataloader, tokenizer
#include "test_tokenizer.h"  // tests: BPE encoding against tiktoken, tokenize_file_to_shards
#include "test_ops.h"        // tests: every op against float64 finite differences
#include "test_model.h"      // tests: the model against PyTorch; recompute; stages at one rank
#include "test_cli.h"        // tests: the trainer as a process: bad input, checkpoints, resume
#include "test_checkpoint.h" // tests: the checkpoint protocol: CRC32C, one history, mixed/corrupt files, lock
#include "test_zero.h"       // tests: ZeRO-0..3 over MPI on N processes
#include "test_hybrid.h"     // tests: hybrid sharding: -hpz = flat ZeRO-3 bitwise, -shard-group (HSDP) deterministic, layouts, groups as nodes
#include "test_plan.h"       // tests: -plan and -z auto
#include "test_sizing.h"     // tests: the real models' descriptors against their published counts; -plan for them
#include "test_hf.h"         // tests: Hugging Face checkpoints in and out, JSON, safetensors
#include "test_hf_llama.h"   // tests: Hugging Face Llama/Mistral/Qwen2: configs, mapping, shards, corrupt files
#include "test_finetune.h"   // tests: loss masks, prompt/completion -tokenize
#include "test_chat.h"       // tests: conversations: chat templates against transformers, masks, cuts, bad input
#include "test_perf.h"       // tests: dev/perf_gpu.sh (the GPU benchmark) syntax and dry run
#include "test_ux.h"         // tests: the settings table as resolved, one Psi, ETA, line-buffered stdout
#include "test_tune.h"       // tests: -tune: candidates that fit, the run bitwise as if started with the choice, resume reuses it
#include "test_offload.h"    // tests: -offload cpu bit-identical to none, checkpoints across offload, refusals
#include "test_resume.h"     // tests: a checkpoint knows its run; reading is not resuming; roll-back transactions; prompts; masks by pread
#include "test_llama.h"      // tests: the Llama family on the CPU device: gradients vs float64, recompute, ZeRO, resume, offload, learns
#include "test_nf4.h"       // tests: NF4 double quantization (ops/nf4.cuh) against bitsandbytes' rule and its library
#include "test_lora.h"       // tests: LoRA: step 0 is the base, the base frozen, adapters' gradients, ZeRO-0..3 bitwise, bad input
#include "test_qlora.h"      // tests: QLoRA: the 4-bit base = a BF16 base of its dequantized values, ZeRO-0..3 bitwise, the plans, bad input
#include "test_reliability.h" // tests: output paths checked at start, regular files only, the stage a resume keeps, PEFT options refused
#include "test_packing.h"    // tests: packed examples isolated (-doc-attention): the segment table, packed = alone, vs PyTorch, R = 2, resume
#include "test_recipe.h"     // tests: README's fine-tuning recipe, run as written on a tiny model
#include "bench_adamw.h"     // make bench: the host AdamW against memcpy
#include "bench_gemm.h"      // make bench: the CPU GEMM per path against the FMA peak

#ifdef ENABLE_FP32
// The FP32 build's cases that repeat, with other bytes, what test/test_bf16 checks the same way (the
// trainer as a process: flags, files, checkpoints, ranks, the planner's choice, -tune; the
// tokenizer and data loader, which hold no floatX): make test runs them in BF16 only, make test-long
// here too (test/test_fp32 --long-only). Left in make test: what FP32 checks differently (ops, the
// model against PyTorch at FP32 tolerances, recompute and stages bitwise in process, Hugging Face
// load and export, the masked loss's gradients, the planner's bytes at 4 bytes a parameter, two
// offload cells with 4-byte staging).
static const char* const g_fp32_long_only[] = {
    "cli_", "ckpt_", "exit_", "data_", "tok_", "ux_", "perf_", "tune_",
    "zero_peak", "zero_memory", "zero_stages_bitwise", "zero_across", "zero_comm", "zero_checkpoint",
    "zero_data", "zero_stopped", "zero_mismatched", "plan_z_auto", "plan_recommendation", "comm_broadcast",
    "hf_corrupt", "hf_json", "hf_half", "ft_tokenize", "llama_zero", "llama_resume", "llama_refusals",
    "model_chunked_classifier_llama", // (its GPT-2 twin model_chunked_classifier stays: FP32's own tolerance)
    "lora_zero", "lora_bad", "lora_export_init", "lora_replicated", "qlora_zero", "qlora_plan", "qlora_bad", "rel_", // (test_reliability.h: no arithmetic)
    NULL};
#endif

// --bcast-check BYTES CHUNK ROOT (under mpirun): comm_broadcast of BYTES from rank ROOT in pieces of at most
// CHUNK bytes (0: the program's own, 1 GiB), every byte checked on every rank; "bcast-check ok" from each.
static int bcast_check_main(int argc, char** argv) {
    if (argc != 4) { fprintf(stderr, "usage: --bcast-check BYTES CHUNK ROOT\n"); return 2; }
    int64_t bytes = atoll(argv[1]), chunk = atoll(argv[2]);
    int root = atoi(argv[3]);
    Comm comm;
    Launch launch;
    comm_init(&comm, &argc, &argv, &launch);
    comm_connect(&comm, 60.0);
    if (chunk > 0) g_bcast_chunk = chunk;
    unsigned char* buf = (unsigned char*)malloc((size_t)bytes);
    if (!buf) { fprintf(stderr, "rank %d: out of memory\n", comm.r); return 1; }
    for (int64_t i = 0; i < bytes; i++) buf[i] = comm.r == root ? (unsigned char)(i * 2654435761u >> 13) : 0xEE;
    comm_broadcast(&comm, buf, bytes, root);
    int64_t bad = -1;
    for (int64_t i = 0; i < bytes && bad < 0; i++)
        if (buf[i] != (unsigned char)(i * 2654435761u >> 13)) bad = i;
    if (bad >= 0) printf("rank %d: byte %lld differs after the broadcast\n", comm.r, (long long)bad);
    else printf("rank %d: bcast-check ok (%lld bytes from rank %d, pieces of %lld)\n", comm.r, (long long)bytes, root, (long long)g_bcast_chunk);
    fflush(stdout);
    free(buf);
    comm_free(&comm);
    comm_finalize();
    return bad >= 0;
}

int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "--train")) return train_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "--train-unchunked")) {
        classifier_chunk_override = 1 << 30; // every micro-batch in one chunk: the whole B*T x Vp logits
        return train_main(argc - 1, argv + 1);
    }
#ifdef ENABLE_FP32
    test_long_only(g_fp32_long_only);
#endif
    if (argc > 1 && !strcmp(argv[1], "--bench-adamw")) return adamw_bench_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "--bench-gemm")) return gemm_bench_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "--bcast-check")) return bcast_check_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "--simd")) { // e.g. "avx512 (this CPU's widest; has: scalar avx2 avx512)"
        int level = simd_level();
        printf("%s (%s; has:", simd_names[level], getenv("ZT_SIMD") && *getenv("ZT_SIMD") ? "ZT_SIMD" : "this CPU's widest");
        for (int k = SIMD_SCALAR; k < SIMD_COUNT; k++)
            if (simd_supported(k)) printf(" %s", simd_names[k]);
        printf("; CRC32C: %s)\n", crc32c_hw_supported() ? "sse4.2" : "portable");
        return 0;
    }
    setenv("ZT_VERBOSE", "1", 0); // every trainer the cases start prints the full start-up they read (ux_startup_short: the default)
    ssize_t n = readlink("/proc/self/exe", g_test_self, sizeof(g_test_self) - 1);
    if (n > 0) g_test_self[n] = 0;
    int rc = test_run_all(argc > 1 ? argv[1] : NULL);
    comm_finalize();
    return rc;
}
