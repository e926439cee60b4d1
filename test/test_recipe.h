// test/test_recipe.h — README.md's fine-tuning recipe, run as written (issue 36), so the first page
// cannot rot: the lines between README's "recipe: begin" and "recipe: end" markers, in a scratch
// directory where ./train is this binary as the trainer and $MODEL a tiny Llama-family checkpoint made
// here (a Hugging Face directory: config.json and model.safetensors exported by the trainer, a
// hand-made tokenizer.json with ChatML's tokens and SmolLM2's chat template), N = 2, T = 192,
// STEPS = 4. Each step must succeed; then what each left is checked: the plan's recommendation, the
// chat shards with their masks, a checkpoint of step 4 holding the adapter for PEFT, the resume to
// step 8, the exported adapter and merged model, the sample. The Python line (PEFT loading the
// adapter onto the base) runs in $ZT_HF_PYTHON when it has peft, and is said to be skipped
// otherwise. In test_bf16 only (a process case).

#ifndef ENABLE_FP32
// README's recipe lines (the indented block between the markers, four spaces removed), or NULL.
static char* recipe_lines(void) {
    char* readme = zt_read_file("README.md");
    if (!readme) return NULL;
    const char* a = strstr(readme, "<!-- recipe: begin");
    const char* b = a ? strstr(a, "<!-- recipe: end -->") : NULL;
    if (!a || !b) { free(readme); return NULL; }
    a = strchr(a, '\n');
    char* out = (char*)calloc((size_t)(b - a) + 1, 1);
    size_t n = 0;
    for (const char* p = a + 1; p < b;) {
        const char* e = strchr(p, '\n');
        if (!e || e > b) e = b;
        if (!strncmp(p, "    ", 4)) { memcpy(out + n, p + 4, (size_t)(e - p - 4)); n += (size_t)(e - p - 4); out[n++] = '\n'; }
        p = e + 1;
    }
    free(readme);
    return out;
}

TEST(readme_recipe_runs) {
    char dir[PATH_MAX], model[PATH_MAX + 16], cmd[4 * PATH_MAX], path[PATH_MAX + 64];
    snprintf(dir, sizeof(dir), "%s/recipe", test_tmpdir());
    snprintf(model, sizeof(model), "%s/model", dir);
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s/data", dir, dir);
    CHECK(test_run_cmd(cmd, NULL, 0) == 0);
    char* lines = recipe_lines();
    CHECKF(lines && strstr(lines, "./train") && strstr(lines, "mpirun"), "README.md has no recipe between <!-- recipe: begin --> and <!-- recipe: end -->");
    if (!lines) return;
    // the model: the tokenizer (ids 0..264) first, then weights of that vocabulary exported beside it
    size_t tlen = 0;
    char* tmpl = (char*)tok_read_file(CHAT_FIXTURES "/smollm2.jinja", &tlen);
    CHECK(tmpl != NULL);
    if (!tmpl) { free(lines); return; }
    chat_test_tokenizer(model, tmpl, tlen, 0, "\"eos_token\": \"<|im_end|>\", ");
    free(tmpl);
    snprintf(path, sizeof(path), "%s/chats.jsonl", dir); // 60 conversations of the tokenizer's words
    FILE* f = fopen(path, "w");
    static const char* const words[] = {"ab", "abc", "a", "b", "c", "ba", "cab", "bca"};
    uint64_t key = rng_key(36, 0x524543, 0);
    for (int i = 0, k = 0; f && i < 60; i++) {
        fprintf(f, "{\"messages\": [{\"role\": \"user\", \"content\": \"");
        for (int w = 0; w < 4; w++) fprintf(f, "%s%s", w ? " " : "", words[rng_u64(key, (uint64_t)k++) % 8]);
        fprintf(f, "\"}, {\"role\": \"assistant\", \"content\": \"");
        for (int w = 0; w < 5; w++) fprintf(f, "%s%s", w ? " " : "", words[rng_u64(key, (uint64_t)k++) % 8]);
        fprintf(f, "\"}]}\n");
    }
    if (f) fclose(f);
    snprintf(cmd, sizeof(cmd), "cd %s && %s --train -tokenize chats.jsonl -tokenizer model -t 192 -o setup && "
             "%s --train -e llama-tiny -vocab 265 -max-seq 256 -layers 2 -t 192 -x 0 -v 0 -s 0 -i 'setup_train_*.bin' -j '' -export-hf weights -export-dtype fp32 && "
             "cp weights/config.json weights/model.safetensors model/ && rm -rf weights setup_*", dir, g_test_self, g_test_self);
    int made = test_run_cmd(cmd, zt_out, sizeof(zt_out)) == 0;
    CHECKF(made, "making the tiny model:\n%s", zt_out);
    if (!made) { free(lines); return; }
    // ./train is this binary as the trainer; mpirun as the suite runs it; python3 the one with peft
    snprintf(path, sizeof(path), "%s/train", dir);
    f = fopen(path, "w");
    if (f) { fprintf(f, "#!/bin/sh\nexec %s --train -threads 1 \"$@\"\n", g_test_self); fclose(f); }
    chmod(path, 0755);
    const char* py = getenv("ZT_HF_PYTHON") && *getenv("ZT_HF_PYTHON") ? getenv("ZT_HF_PYTHON") : "python3";
    snprintf(cmd, sizeof(cmd), "%s -c 'import peft, transformers' 2>/dev/null", py);
    int has_peft = test_run_cmd(cmd, NULL, 0) == 0;
    snprintf(path, sizeof(path), "%s/recipe.sh", dir);
    f = fopen(path, "w");
    int python_lines = 0;
    if (f) {
        fprintf(f, "set -ex\n" ZT_CLEAN_ENV "\nexport OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
                   "OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1\npython3() { %s \"$@\"; }\n", py);
        for (char* p = lines; *p;) { // the README's lines, its settings of MODEL, N, T and STEPS replaced by ours
            char* e = strchr(p, '\n');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            if (!strncmp(p, "MODEL=", 6)) fprintf(f, "MODEL=%s\n", model);
            else if (!strncmp(p, "N=", 2)) fprintf(f, "N=2 T=192 STEPS=4\n");
            else if (!strncmp(p, "python3 ", 8) && !has_peft) { python_lines++; fprintf(f, "# (skipped: no peft) %.*s\n", (int)n, p); }
            else fprintf(f, "%.*s\n", (int)n, p);
            p += n + (e ? 1 : 0);
        }
        fclose(f);
    }
    free(lines);
    static char log[1 << 18];
    snprintf(cmd, sizeof(cmd), "cd %s && bash recipe.sh", dir);
    int rc = test_run_cmd(cmd, log, sizeof(log));
    CHECKF(rc == 0, "README's recipe failed (exit %d); the last lines:\n%s", rc, strlen(log) > 6000 ? log + strlen(log) - 6000 : log);
    if (rc != 0) return;
    // what each step left
    CHECKF(strstr(log, "recommendation: -z"), "step 1 (-plan) printed no recommendation");
    snprintf(cmd, sizeof(cmd), "cd %s && ls data/chats_train_*.bin data/chats_train_*.bin.mask data/chats_val_*.bin && "
             "test -s out/adapter_00000004/adapter_model.safetensors && test -s out/DONE_00000008 && "
             "test -s out/adapter_00000008/adapter_config.json && cmp out/adapter_00000008/adapter_model.safetensors adapter/adapter_model.safetensors && "
             "test -s merged/config.json && test -s merged/model.safetensors", dir);
    CHECKF(test_run_cmd(cmd, zt_out, sizeof(zt_out)) == 0, "the recipe's files (chat shards and masks, checkpoints of steps 4 and 8 with "
           "their adapters, the adapter = step 8's, the merged model):\n%s", zt_out);
    CHECKF(strstr(log, "resume: step 4") && strstr(log, "exported the adapters at step 8"), "the resume from step 4 or the export at step 8 not said");
    CHECKF(strstr(log, "sample at step 8, prompt 1 (the user's turn, through the smollm2 chat template):\n--- prompt\n<|im_start|>system\n") &&
           strstr(log, "<|im_start|>user\nWho wrote the book of Ruth?<|im_end|>\n<|im_start|>assistant\n\n--- reply\n"),
           "step 6 printed no sample of the prompt through the chat template at step 8");
    if (has_peft) CHECKF(strstr(log, "python3 -c") != NULL, "the Python line did not run");
    printf("    README's recipe ran: plan, chat tokenize, LoRA -z 3 on 2 ranks to step 4 (checkpoint with its PEFT adapter), resume to 8, "
           "adapter + merged export, sample%s\n", has_peft ? ", PEFT loads the adapter" : "");
    if (python_lines) printf("    (the Python line skipped: %s has no peft)\n", py);
}
#endif
