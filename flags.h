// flags.h — every flag of ./train in one table (FLAG_TABLE, an X-macro): the Flags struct, parsing
// argv, converting text to values, -help, the start-up settings table and the hash ranks compare.
// One row per flag: llm.c's single letters where the meaning is the same, descriptive names for
// everything new. "auto" defaults stay text here and are resolved per device by resolve_defaults
// (startup.h); FLAG_SHOW records what a flag resolved to, for the settings table.
//
// May call: device.cuh (die_user, printf0; fnv1a from rng.h, which it includes) and zero.h (comm_finalize, for -help on every
// rank). Takes nothing of the trainer's: train_gpt.cu and the headers below it (plan.h, startup.h,
// tune.h) read Flags.
#ifndef ZT_FLAGS_H
#define ZT_FLAGS_H
#include <errno.h>
#include <float.h>
#include <limits.h>
#include "device.cuh" // defines: die_user, printf0, g_rank (and includes rng.h: fnv1a, FNV_INIT)
#include "zero.h"     // defines: comm_finalize

typedef enum { F_INT, F_FLOAT, F_STR, F_SWITCH } FlagType; // F_SWITCH: present = 1, takes no value
// FLAG_RUN: the flag defines the run (model, data, T, batch, optimizer, schedule, seed, data order):
// checkpoints record it, a resume takes it when not given and refuses another value unless
// -resume-change names it (run_record.h). FLAG_KEEP: recorded and taken the same
// way, but a resume may change it freely (-x, -n, -nk, -v, -m, -s, -z, -r, -offload, ...: how the
// run goes on, not what it is; -z, -r and -offload as the run ran them, whether given, planned or
// tuned: a resume at another stage could run out of memory). FLAG_FREE: not recorded (-threads,
// logging, actions such as -export, ...).
typedef enum { FLAG_FREE, FLAG_RUN, FLAG_KEEP } FlagKind;

// X(flag, field, type, default, run, help)
#define FLAG_TABLE(X)                                                                                   \
    X("-device",        device,          F_STR,   "auto",   FLAG_FREE, "cpu | cuda | auto (cuda when a GPU is present)")                    \
    X("-e",             model,           F_STR,   "auto",   FLAG_RUN,  "model: dN (d6 d12 d24 d36 d48 d60 d72 d84), tiny, a Llama-family descriptor (llama-tiny, ...: docs/models.md lists them), an llm.c .bin file, or a Hugging Face GPT-2, Llama, Mistral, Qwen2 or Qwen3 (a directory with config.json + model.safetensors or its index, or a .safetensors file); auto: d12 on cuda, tiny on cpu") \
    X("-layers",        layers,          F_INT,   "0",      FLAG_RUN,  "override L, the number of layers (0: from -e)")                   \
    X("-channels",      channels,        F_INT,   "0",      FLAG_RUN,  "override C, the width (0: from -e)")                               \
    X("-heads",         heads,           F_INT,   "0",      FLAG_RUN,  "override NH, the attention heads (0: from -e)")                    \
    X("-max-seq",       max_seq,         F_INT,   "0",      FLAG_RUN,  "override the model's maximum sequence length (0: from -e)")       \
    X("-vocab",         vocab,           F_INT,   "0",      FLAG_RUN,  "override V, the vocabulary size (0: from -e); padded to 128")     \
    X("-i",             train_data,      F_STR,   "data/kjv_train.bin", FLAG_RUN,  "train data: glob of llm.c token shards")              \
    X("-j",             val_data,        F_STR,   "data/kjv_val.bin",   FLAG_RUN,  "val data: glob of llm.c token shards (\"\": none)")     \
    X("-tokenizer",     tokenizer,       F_STR,   "data/gpt2_tokenizer.bin", FLAG_FREE, "tokenizer for -tokenize, -prompt and samples: llm.c's file (+ -merges), or a Hugging Face tokenizer.json or a directory holding one (byte-level BPE: GPT-2, Llama 3, Qwen2, SmolLM2); default: -e DIR's tokenizer.json if it has one, else GPT-2's") \
    X("-tokenize",      tokenize,        F_STR,   "",       FLAG_FREE, "encode this text file with the -tokenizer (GPT-2's BPE by default) into llm.c shards named by -o (a prefix; uint32 ids above 65,536), then exit; documents are separated by lines that are exactly <|endoftext|>. A .jsonl file of {\"prompt\", \"completion\"} strings, or of conversations ({\"messages\": [...]} or prompt/completion message lists, rendered with the -tokenizer directory's chat template), is packed for -t with a loss mask (completion + EOT count; the assistant's turns + their end-of-turn token)") \
    X("-chat-prompt",   chat_prompt,     F_STR,   "auto",   FLAG_FREE, "-prompt through the model's chat template: 1 (each prompt is the user's message, or a .jsonl line's {\"messages\": [...]}, rendered with the generation prompt as apply_chat_template(add_generation_prompt=True) renders it; generation also stops at the template's end of turn) | 0 (the text as given, after the document token unless it starts with that or the BOS) | auto (1 when the tokenizer's directory has a chat template this build renders; docs/chat.md)") \
    X("-chat-date",     chat_date,       F_STR,   "",       FLAG_FREE, "with -tokenize of conversations and -prompt through a template: the date a Llama 3.1/3.2 chat template writes (YYYY-MM-DD; \"\": the template's own, which is today in UTC for 3.2 and 26 Jul 2024 for 3.1)") \
    X("-merges",        merges,          F_STR,   "data/gpt2_merges.bin", FLAG_FREE, "GPT-2 merge list for llm.c's tokenizer file (a tokenizer.json holds its own)")                         \
    X("-val-every",     val_every_doc,   F_INT,   "20",     FLAG_FREE, "with -tokenize: every N-th document goes to the val shards (0: none)") \
    X("-shard-tokens",  shard_tokens,    F_INT,   "100000000", FLAG_FREE, "with -tokenize: tokens per shard at most")                          \
    X("-o",             out_dir,         F_STR,   "",       FLAG_FREE, "output directory: log.jsonl and checkpoints (\"\": none)")        \
    X("-b",             B,               F_INT,   "auto",   FLAG_KEEP, "micro-batch size per rank (auto: 8 on cpu, 16 on cuda)")           \
    X("-t",             T,               F_INT,   "auto",   FLAG_RUN,  "sequence length (auto: 64 on cpu, 1024 on cuda, at most the model's)") \
    X("-d",             total_batch,     F_INT,   "-1",     FLAG_RUN,  "total batch per step in tokens; a multiple of B*T*R gives accumulation (-1: B*T*R)") \
    X("-x",             max_steps,       F_INT,   "auto",   FLAG_KEEP, "steps to train (auto: 300 on cpu, one epoch on cuda; -1: one epoch)") \
    X("-l",             lr,              F_FLOAT, "auto",   FLAG_RUN,  "peak learning rate (auto: 1e-3 on cpu, 6e-4 on cuda)")             \
    X("-u",             warmup,          F_INT,   "auto",   FLAG_RUN,  "learning-rate warmup steps (auto: 5% of the steps)")               \
    X("-q",             lr_final,        F_FLOAT, "0.1",    FLAG_RUN,  "final learning rate as a fraction of the peak")                    \
    X("-k",             lr_schedule,     F_STR,   "cosine", FLAG_RUN,  "learning-rate schedule after warmup: cosine | linear | constant")  \
    X("-c",             weight_decay,    F_FLOAT, "0.1",    FLAG_RUN,  "AdamW weight decay (matrices only)")                               \
    X("-beta1",         beta1,           F_FLOAT, "0.9",    FLAG_RUN,  "AdamW beta1")                                                      \
    X("-beta2",         beta2,           F_FLOAT, "0.95",   FLAG_RUN,  "AdamW beta2")                                                      \
    X("-eps",           eps,             F_FLOAT, "1e-8",   FLAG_RUN,  "AdamW epsilon")                                                    \
    X("-grad-clip",     grad_clip,       F_FLOAT, "1.0",    FLAG_RUN,  "clip the global gradient norm to this (0: off)")                   \
    X("-seed",          seed,            F_INT,   "1337",   FLAG_RUN,  "seed of initialisation, data order and sampling")                  \
    X("-shuffle",       shuffle,         F_INT,   "1",      FLAG_RUN,  "1: shuffle samples every epoch; 0: llm.c's sequential order")      \
    X("-doc-attention", doc_attention,   F_STR,   "auto",   FLAG_RUN,  "1: each example of a packed sample attends only to itself, at positions from 0 (examples start where the .mask files record them, else at each EOT of plain shards); 0: a sample is one sequence (llm.c); auto: 1 when the data records example starts (-tokenize of a .jsonl), else 0 (docs/packing.md)") \
    X("-lora",          lora,            F_INT,   "0",      FLAG_RUN,  "LoRA: train rank-r adapters on a frozen base (0: off, every tensor trains); the base holds no gradient, master or AdamW state (docs/lora.md)") \
    X("-lora-alpha",    lora_alpha,      F_FLOAT, "0",      FLAG_RUN,  "LoRA: the update is scaled by alpha / r (0: alpha = r, scale 1)") \
    X("-lora-targets",  lora_targets,    F_STR,   "all",    FLAG_RUN,  "LoRA: comma-separated projections to adapt, PEFT's names: GPT-2 c_attn,c_proj,c_fc; Llama q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj (all: every one)") \
    X("-lora-dropout",  lora_dropout,    F_FLOAT, "0",      FLAG_RUN,  "LoRA: dropout p on each adapter's input in training, as PEFT's lora_dropout (0: none); a counter-based mask, the same for any R, stage, recompute or offload") \
    X("-lora-export",   lora_export,     F_STR,   "",       FLAG_FREE, "LoRA: when training ends, write the adapters as PEFT does into this directory (adapter_model.safetensors, F32 from the master weights, and adapter_config.json)") \
    X("-lora-base",     lora_base,       F_STR,   "auto",   FLAG_FREE, "LoRA under ZeRO-3: sharded (the frozen base sharded and gathered layer by layer) | replicated (every rank holds the whole base and never gathers it; only the adapters are sharded) | auto (-z auto, -r auto, -tune: the planner's choice; otherwise sharded). ZeRO-0/1/2 hold the whole base anyway") \
    X("-lora-quant",    lora_quant,      F_STR,   "none",   FLAG_RUN,  "LoRA: none (the frozen base's layer matrices in BF16) | nf4 (QLoRA: in bitsandbytes' 4-bit NormalFloat with double quantization, quantized at load from -e's weights, or read as they are from a bitsandbytes 4-bit checkpoint; ZeRO-3 shards and gathers the 4-bit bytes; each layer dequantized to BF16 before its forward and again before its backward; docs/qlora.md)") \
    X("-lora-init",     lora_init,       F_STR,   "",       FLAG_RUN,  "LoRA: start the adapters from a PEFT adapter directory (adapter_config.json + adapter_model.safetensors) instead of PEFT's initialisation; its r, lora_alpha, target_modules and base must be this run's") \
    X("-v",             val_every,       F_INT,   "auto",   FLAG_KEEP, "validation loss every N steps (auto: 25 on cpu, 250 on cuda; 0: never)") \
    X("-m",             val_steps,       F_INT,   "20",     FLAG_KEEP, "validation batches per evaluation (-1: the whole val set)")       \
    X("-s",             sample_every,    F_INT,   "auto",   FLAG_KEEP, "sample text every N steps (auto: 100 on cpu, 500 on cuda; 0: never)") \
    X("-g",             gen_tokens,      F_INT,   "64",     FLAG_KEEP, "tokens to generate per sample")                                    \
    X("-temperature",   temperature,     F_FLOAT, "1.0",    FLAG_FREE, "sampling temperature of the samples and -prompt (0: greedy, always the most likely token)") \
    X("-top-k",         top_k,           F_INT,   "0",      FLAG_FREE, "sample from the K most likely tokens only (0: all)")               \
    X("-n",             ckpt_every,      F_INT,   "0",      FLAG_KEEP, "checkpoint every N steps and at the end (0: never; needs -o)")     \
    X("-nk",            ckpt_keep,       F_INT,   "0",      FLAG_KEEP, "keep only the newest N checkpoints (0: keep all)")                 \
    X("-y",             resume,          F_INT,   "0",      FLAG_FREE, "1: resume from the newest complete checkpoint in -o; the flags it records (listed after this table) are taken from it when not given")              \
    X("-resume-change", resume_change,   F_STR,   "",       FLAG_FREE, "with -y 1: the run-defining flags this resume changes on purpose, e.g. -i or -i,-l (a given value that differs from the checkpoint's is refused otherwise)") \
    X("-r",             recompute,       F_INT,   "1",      FLAG_KEEP, "recompute in backward: 0 none, 1 GELU, 2 GELU+layernorms, 3 whole blocks; auto: with -z auto, the planner's choice") \
    X("-z",             zero_stage,      F_INT,   "0",      FLAG_KEEP, "ZeRO stage: 0 replicate, 1 shard optimizer, 2 +gradients, 3 +parameters; auto: the lowest-time stage that fits (see -plan)") \
    X("-threads",       threads,         F_INT,   "0",      FLAG_FREE, "CPU threads per rank (0: cores / ranks on this node, or OMP_NUM_THREADS)") \
    X("-blas",          blas,            F_INT,   "0",      FLAG_FREE, "1: CPU matmuls through OpenBLAS when built with it (machine-dependent sums; docs/performance.md says when it is faster); 0: the plain loop") \
    X("-attn",          attn,            F_STR,   "auto",   FLAG_FREE, "attention on the CUDA device: cudnn (cuDNN 9's fused attention, a make USE_CUDNN=1 build with libcudnn.so.9 present; exit 2 where it cannot run) | own (our kernels) | auto (cudnn where it can run, else own; with -tune, the faster of the two). Not with -doc-attention 1 yet. docs/cudnn.md; builds only: never run on a GPU") \
    X("-comm-trace",    comm_trace,      F_INT,   "0",      FLAG_FREE, "1: print every collective (kind, block, bytes)")                   \
    X("-comm-timeout",  comm_timeout,    F_FLOAT, "300",    FLAG_FREE, "seconds a collective may take before the run ends with an error (0: forever)") \
    X("-comm-delay",    comm_delay,      F_INT,   "0",      FLAG_FREE, "debug: delay every collective by N ms (exposes missing waits)")   \
    X("-poison",        poison,          F_INT,   "auto",   FLAG_FREE, "debug: fill released ZeRO buffers with NaN (auto: 1 in DEBUG=1 builds, else 0)")                       \
    X("-data-trace",    data_trace,      F_INT,   "0",      FLAG_FREE, "debug: log a hash of every rank's micro-batch")                    \
    X("-log-hash",      log_hash,        F_INT,   "0",      FLAG_FREE, "log hashes of parameters, m and v at the end (reproducibility checks)") \
    X("-verbose",       verbose,         F_INT,   "auto",   FLAG_FREE, "start-up detail: 0 the flags given (or taken from a checkpoint) and a summary; 1 also every flag's row, the memory table by tag and the model state against the ZeRO paper's count; log.jsonl's settings record holds every flag either way (auto: $ZT_VERBOSE, else 0)") \
    X("-resume-step",   resume_step,     F_INT,   "0",      FLAG_FREE, "with -y 1: resume from this checkpoint step instead of the newest")     \
    X("-export",        export_path,     F_STR,   "",       FLAG_FREE, "when training ends, write the model to this llm.c file (with -y 1 -x 0: consolidates a sharded checkpoint)") \
    X("-plan",          plan,            F_SWITCH, "0",     FLAG_FREE, "print memory and time per rank for every ZeRO stage x recompute mode and a recommendation, then exit (allocates nothing)") \
    X("-world",         world,           F_INT,   "0",      FLAG_FREE, "with -plan: plan for this many ranks (0: the ranks this run has)")   \
    X("-gpu-mem",       gpu_mem,         F_STR,   "",       FLAG_FREE, "memory per rank for -plan and -z auto, e.g. 80GiB, 40GB, 512MiB (\"\": the device's free memory)") \
    X("-host-mem",      host_mem,        F_STR,   "",       FLAG_FREE, "host memory per node for -plan's and -z auto's offload rows on cuda, e.g. 2TiB (\"\": this machine's available memory, said in the output)") \
    X("-link-gbps",     link_gbps,       F_FLOAT, "auto",   FLAG_FREE, "one link for every collective for -plan, Gbit/s per rank and direction: sets -link-intra and -link-inter both (auto: those two)") \
    X("-gpus-per-node", gpus_per_node,   F_STR,   "auto",   FLAG_FREE, "ranks per node for -plan and -z auto: which collectives cross nodes (auto: the launcher's ranks per node; with -plan -world: 8 on cuda, all on cpu)") \
    X("-link-intra",    link_intra,      F_STR,   "auto",   FLAG_FREE, "link inside a node for -plan and -z auto, per rank and direction: a rate (400Gbit, 50GB/s, 1.6Tbit) or nvlink3 | nvlink4 | nvlink5 | pcie4 | pcie5 (auto: nvlink4 on cuda, 80Gbit shared memory on cpu; -link-gbps sets both links)") \
    X("-link-inter",    link_inter,      F_STR,   "auto",   FLAG_FREE, "link between nodes for -plan and -z auto, per rank and direction (a NIC per GPU; one NIC shared by a node's ranks: its rate divided by them): a rate or xdr | ndr | hdr | 400gbe | 200gbe | 100gbe | 25gbe (auto: ndr; -link-gbps sets both links)") \
    X("-tflops",        tflops,          F_FLOAT, "auto",   FLAG_FREE, "compute rate per rank for -plan, TFLOP/s (auto: on cpu the median of 15 matmuls timed by CPU time, on cuda 50% of the -gpu's BF16 peak)") \
    X("-max-skips",     max_skips,       F_INT,   "10",     FLAG_KEEP, "end the run with exit code 4 after this many consecutive skipped steps (non-finite gradient norm or update; 0: never)") \
    X("-save-model",    save_model,      F_STR,   "1",      FLAG_KEEP, "llm.c model file in each checkpoint: 1 every one, last only the final one, 0 none (resume needs only the state files)") \
    X("-io-timeout",    io_timeout,      F_FLOAT, "auto",   FLAG_FREE, "seconds ranks wait for rank 0's checkpoint or -export writes and for each other's evaluation reads (auto: bytes rank 0 writes at 50 MB/s, at least 600; 0: forever)") \
    X("-export-hf",     export_hf,       F_STR,   "",       FLAG_FREE, "when training ends, write the model as a Hugging Face checkpoint into this directory (config.json + model.safetensors, or shards + index above 5 GB): GPT2LMHeadModel, or for the Llama family the -e checkpoint's architecture (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM); with -lora the merged model (W + (alpha/r) B A); beside it generation_config.json and the tokenizer's files") \
    X("-prompt",        prompt,          F_STR,   "",       FLAG_FREE, "generate from this prompt (or from each line of @FILE; @FILE.jsonl: one JSON string per line, so a prompt may hold newlines, or a {\"messages\": [...]} list) at the sample steps and at the end, up to -g tokens or a stop: the document token, config.json's and generation_config.json's eos_token_id, the chat template's end of turn (-chat-prompt)") \
    X("-export-dtype",  export_dtype,    F_STR,   "auto",   FLAG_FREE, "dtype of -export / -export-hf: fp32 (from the FP32 master weights), bf16 (the parameters as trained), fp16 (-export-hf only); auto: -export the parameters' dtype, -export-hf fp32") \
    X("-gpu",           gpu,             F_STR,   "auto",   FLAG_FREE, "GPU model for -plan and MFU: h100, h200, a100, l40s, l4, a10, ... (auto: the GPU present; h100 when planning without one)") \
    X("-tune",          tune,            F_SWITCH, "0",     FLAG_FREE, "measure before training: every flag left at auto (-z, -r, -offload; with -tune, those not given count as auto) is chosen by running -tune-steps steps of each of the planner's fastest -tune-rows rows that fit (offload rows only where -z auto would offload: nothing fits without), on scratch state; the fastest that fits wins, and the run starts from its source with it (as if given; written into checkpoints, a resume reuses it)") \
    X("-tune-steps",    tune_steps,      F_INT,   "5",      FLAG_FREE, "with -tune: timed steps per candidate, after one warm-up step") \
    X("-tune-rows",     tune_rows,       F_INT,   "4",      FLAG_FREE, "with -tune: candidates at most, the planner's fastest rows that fit (1..16)") \
    X("-offload",       offload,         F_STR,   "auto",   FLAG_KEEP, "where each rank's shard of the optimizer state (master, m, v) lives: none (the device) | cpu (host memory; AdamW runs on the host, bit-identical to none; needs -z 1, 2 or 3) | nvme (a file per rank under -offload-dir, streamed through -offload-buffer; likewise bit-identical) | auto (with -z auto, -r auto or -tune: cpu only when nothing fits without it, nvme only when -offload-dir is given and nothing fits in host memory either; otherwise none)") \
    X("-offload-params", offload_params, F_STR,  "none",   FLAG_KEEP, "where each rank's shard of the BF16 parameters lives under -z 3: none (the device) | cpu (page-locked host memory) | nvme (a file per rank under -offload-dir; -z auto chooses cpu or nvme only when nothing else fits, or among them when given); each block's shard is copied up into its gather buffer as it is gathered, the update copied back down (never up and down with -offload); with -offload cpu|nvme the FP32 gradient shard leaves the device too (each block's reduced gradient copied down every micro-step: to the host, or with nvme into the state file); bit-identical to none (docs/offload.md)") \
    X("-shard-group",   shard_group,     F_STR,   "0",      FLAG_KEEP, "hybrid sharding (HSDP, FSDP's HYBRID_SHARD): ZeRO-1/2/3 inside each group of N consecutive ranks (a node), replicated across the groups: a gradient is reduce-scattered inside its group, then each shard all-reduced across the groups; deterministic, flat ZeRO's loss within 1e-6 in FP32 (1e-4 in BF16), not its bits (auto: the ranks per node the launcher says; 0: all ranks, flat ZeRO; docs/hybrid.md)") \
    X("-hpz",           hpz,             F_STR,   "0",      FLAG_KEEP, "ZeRO++'s hierarchical partitioning (-z 3): the parameters in a second partition of N parts, one per member of each group of N consecutive ranks (a node), so that every gather stays inside the group; the gradient and optimizer state stay sharded over all ranks; flat ZeRO-3's bits at 1/N instead of 1/R of the parameters per rank (auto: the ranks per node; 0: off; docs/hybrid.md)") \
    X("-pcie-gbps",     pcie_gbps,       F_FLOAT, "auto",   FLAG_FREE, "host<->device bandwidth per rank for -plan's offload rows, Gbit/s per direction (auto: 200, PCIe 4.0 x16-class)") \
    X("-offload-dir",   offload_dir,     F_STR,   "",       FLAG_FREE, "with -offload nvme: the directory of each rank's optimizer-state file (12 bytes per element of its shard), with -offload-params nvme of its parameter file (2 bytes per parameter of its shard); removed at exit") \
    X("-offload-buffer", offload_buffer, F_STR,   "256MiB", FLAG_FREE, "with -offload nvme: host memory per rank for streaming the state (three units of master, m, v plus the gradient and parameter staging), e.g. 256MiB") \
    X("-disk-gbps",     disk_gbps,       F_FLOAT, "auto",   FLAG_FREE, "disk bandwidth per node for -plan's nvme offload rows, Gbit/s per direction, shared by the node's ranks (auto: 16, one NVMe SSD-class)")

// How each type is declared and converted from its text.
#define FLAG_FIELD_F_INT(field) int field;
#define FLAG_FIELD_F_FLOAT(field) float field;
#define FLAG_FIELD_F_STR(field) char field[1024];
#define FLAG_FIELD_F_SWITCH(field) int field;
#define FLAG_CONV_F_INT(flag, field, help) \
    if (parse_int(f->field##_str, &f->field)) die_user("flag %s: '%s' is not an integer (%s)", flag, f->field##_str, help);
#define FLAG_CONV_F_FLOAT(flag, field, help) \
    if (parse_float(f->field##_str, &f->field)) die_user("flag %s: '%s' is not a number (%s)", flag, f->field##_str, help); \
    if (!isfinite(f->field)) die_user("flag %s: '%s' is beyond a float's range (%.3g at most)", flag, f->field##_str, (double)FLT_MAX);
#define FLAG_CONV_F_STR(flag, field, help) snprintf(f->field, sizeof(f->field), "%s", f->field##_str);
#define FLAG_CONV_F_SWITCH(flag, field, help) f->field = atoi(f->field##_str);

// Per flag: its text as given or defaulted (_given, kept for the settings table), its text as
// resolved ("auto" and sentinels replaced by what the run uses: _str, hashed across ranks), its value,
// and whether the command line gave it (_set: -tune tunes only what was not given).
typedef struct {
#define X(flag, field, type, def, run, help) char field##_given[1024]; char field##_str[1024]; char field##_set; FLAG_FIELD_##type(field)
    FLAG_TABLE(X)
#undef X
} Flags;

static void flags_print_help(FILE* f) {
    fprintf(f, "usage: ./train [flags]      (mpirun -np R ./train [flags] for R processes)\n\n");
#define X(flag, field, type, def, run, help) \
    fprintf(f, "  %-14s %s (%s)\n", flag, help, type == F_SWITCH ? "a switch: no value" : def[0] ? "default: " def : "default: \"\"");
    FLAG_TABLE(X)
#undef X
    // the recorded flags of each kind, from the table's run column (docs/resume.md's table is this)
    fprintf(f, "\nrecorded in each checkpoint and taken by -y 1 when not given:\n");
    fprintf(f, "  FLAG_RUN (another value refused unless -resume-change names it):");
#define X(flag, field, type, def, run, help) if (run == FLAG_RUN) fprintf(f, " %s", flag);
    FLAG_TABLE(X)
#undef X
    fprintf(f, "\n  FLAG_KEEP (another value accepted, said in one line):");
#define X(flag, field, type, def, run, help) if (run == FLAG_KEEP) fprintf(f, " %s", flag);
    FLAG_TABLE(X)
#undef X
    fprintf(f, "\n");
}

// s as a JSON string (quotes, escapes) on out.
static void json_put_string(FILE* out, const char* s) {
    fputc('"', out);
    for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
        else if (*p < 0x20) fprintf(out, "\\u%04x", *p);
        else fputc(*p, out);
    }
    fputc('"', out);
}

// Parse a whole-string integer / float; 0 on success.
static int parse_int(const char* s, int* out) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < INT_MIN || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}
static int parse_float(const char* s, float* out) {
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v)) return -1;
    *out = (float)v;
    return 0;
}

// Store the text of every flag (defaults, then argv), then convert. "auto" stays text until
// resolve_defaults. Bad input: one line naming the flag, exit 2.
static void flags_parse(Flags* f, int argc, char** argv) {
    memset(f, 0, sizeof(*f));
#define X(flag, field, type, def, run, help) snprintf(f->field##_str, sizeof(f->field##_str), "%s", def);
    FLAG_TABLE(X)
#undef X
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "-help") || !strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (g_rank == 0) flags_print_help(stdout);
            fflush(stdout);
            comm_finalize(); // every rank ends cleanly (mpirun -np 2 ./train -help exits 0)
            exit(0);
        }
        int known = 0;
#define X(flag, field, type, def, run, help)                                                                      \
        if (!known && !strcmp(a, flag) && type == F_SWITCH) {                                               \
            known = 1;                                                                                       \
            f->field##_set = 1;                                                                              \
            snprintf(f->field##_str, sizeof(f->field##_str), "1");                                          \
        }                                                                                                    \
        if (!known && !strcmp(a, flag)) {                                                                    \
            known = 1;                                                                                       \
            f->field##_set = 1;                                                                              \
            if (i + 1 >= argc) die_user("flag %s needs a value (%s). HINT: ./train -help", flag, help);      \
            if (strlen(argv[i + 1]) >= sizeof(f->field##_str)) die_user("flag %s: value too long", flag);    \
            snprintf(f->field##_str, sizeof(f->field##_str), "%s", argv[++i]);                             \
        }
        FLAG_TABLE(X)
#undef X
        if (!known) die_user("unknown flag '%s'. HINT: ./train -help lists the flags", a);
    }
#define X(flag, field, type, def, run, help) snprintf(f->field##_given, sizeof(f->field##_given), "%s", f->field##_str);
    FLAG_TABLE(X)
#undef X
}

// Record what a flag resolved to, for the settings table (after the ranks compared their hashes:
// these texts are for people, e.g. "unused: ..." where nothing needed the value).
#define FLAG_SHOW(f, field, ...) snprintf((f)->field##_str, sizeof((f)->field##_str), __VA_ARGS__)

// Convert every flag's text (after "auto" has been replaced) to its value.
static void flags_convert(Flags* f) {
#define X(flag, field, type, def, run, help) FLAG_CONV_##type(flag, field, help)
    FLAG_TABLE(X)
#undef X
}

// One row of the settings table: the value as given, and "given → resolved" when the run resolved
// it ("auto → 15", "-1 → 4096"), padded by characters, not bytes ("→" is three bytes of UTF-8).
static void flags_print_row(const char* flag, const char* given, const char* str) {
    char v[160];
    if (strcmp(given, str)) snprintf(v, sizeof(v), "%s \u2192 %s", given[0] ? given : "\"\"", str);
    else snprintf(v, sizeof(v), "%s", str);
    int w = 0, cut = 0;
    for (int i = 0; v[i]; i++) {
        if (((unsigned char)v[i] & 0xC0) != 0x80) w++; // count characters: skip UTF-8 continuation bytes
        if (w > 70) { cut = i; break; }
    }
    if (cut) { v[cut] = 0; w = 70; }
    printf0("| %-15s | %s%*s |\n", flag, v, 70 - w, ""); // (15: -offload-buffer, the longest flag)
}

// The settings table: every flag's row (all = 1), or the rows of the flags given on the command line
// (at most `most`) and one line naming those a checkpoint supplied with another value than the default
// (a resume: "(from checkpoint)" rows in the full table), then a line counting what is not shown.
static void flags_print_table(const Flags* f, int all, int most) {
    int shown = 0, more = 0, quiet = 0, taken = 0;
    char ck[240] = ""; // "-e llama-tiny -lora 4 ...": the flags a checkpoint supplied, as far as they fit
    size_t ckn = 0;
    printf0("+-----------------+------------------------------------------------------------------------+\n");
    printf0("| flag            | value (as given \u2192 as resolved)                                         |\n");
    printf0("+-----------------+------------------------------------------------------------------------+\n");
#define X(flag, field, type, def, run, help)                                                                      \
    if (all || f->field##_set) {                                                                                  \
        if (all || shown < most) { flags_print_row(flag, f->field##_given, f->field##_str); shown++; }            \
        else more++;                                                                                              \
    } else if (!strcmp(f->field##_given, "(from checkpoint)") && strcmp(f->field##_str, def)) {                   \
        taken++;                                                                                                  \
        size_t w = strlen(flag) + strlen(f->field##_str) + 2;                                                    \
        if (ckn + w + 4 < sizeof(ck)) ckn += (size_t)snprintf(ck + ckn, sizeof(ck) - ckn, " %s %s", flag, f->field##_str[0] ? f->field##_str : "\"\""); \
        else if (ckn + 4 < sizeof(ck)) ckn += (size_t)snprintf(ck + ckn, sizeof(ck) - ckn, " ..."); /* (full: the rest cut) */ \
    } else quiet++;
    FLAG_TABLE(X)
#undef X
    printf0("+-----------------+------------------------------------------------------------------------+\n");
    if (all) return;
    if (taken) printf0("from the checkpoint (%d flag(s) not at their defaults):%s\n", taken, ck);
    printf0("(%s%d flag(s) at their defaults or resolved from them not shown: -verbose 1 prints every row; log.jsonl's settings record holds them)\n",
            more ? "given flags beyond the first rows and " : "", quiet + more + taken);
}

// Every flag as given and as resolved, one JSON record (log.jsonl's "settings").
static void flags_log_json(const Flags* f, FILE* out) {
    fprintf(out, "{\"settings\": {");
    int first = 1;
#define X(flag, field, type, def, run, help)                                                              \
    fprintf(out, "%s\"%s\": [", first ? "" : ", ", flag); first = 0;                                     \
    json_put_string(out, f->field##_given); fputs(", ", out); json_put_string(out, f->field##_str); fputc(']', out);
    FLAG_TABLE(X)
#undef X
    fprintf(out, "}}\n");
}

// A hash of every flag's final text: ranks compare it at start-up.
static uint64_t flags_hash(const Flags* f) {
    uint64_t h = FNV_INIT;
#define X(flag, field, type, def, run, help) h = fnv1a(h, flag, strlen(flag)); h = fnv1a(h, f->field##_str, strlen(f->field##_str) + 1);
    FLAG_TABLE(X)
#undef X
    return h;
}

#endif // ZT_FLAGS_H
