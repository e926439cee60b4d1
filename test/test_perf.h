// test/test_perf.h — the GPU benchmark script (dev/perf_gpu.sh), which only runs on a GPU machine,
// kept runnable here: its syntax, the PyTorch side's syntax, and its dry run, which asks this
// binary's planner for d48's micro-batch on an H200's memory and builds the table from sample lines.

TEST(perf_script_dry_run) {
    static char out[1 << 16];
    int rc = test_run_cmd("bash -n dev/perf_gpu.sh", out, sizeof(out));
    CHECKF(rc == 0, "bash -n dev/perf_gpu.sh: %s", out);
    rc = test_run_cmd("python3 -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], \"exec\")' dev/bench_torch_gpu.py",
                      out, sizeof(out));
    CHECKF(rc == 0, "dev/bench_torch_gpu.py does not compile: %s", out);
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=2 ZT_TRAIN='%s --train' PERF_LOGS=%s/perf bash dev/perf_gpu.sh --dry-run",
             g_test_self, test_tmpdir());
    rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0, "dry run exit %d: %s", rc, out);
    // the planner's pick for d48 on 139 GiB, the runs it would make, and the table with MFU by llm.c's formula:
    // 405000 tok/s x (6 N + 6 L C T) for d12 (N = 124,475,904 with Vp = 50304) over 989 TFLOP/s = 32.9%
    CHECKF(strstr(out, "d48: the planner's B = ") != NULL, "no d48 micro-batch chosen:\n%s", out);
    CHECKF(strstr(out, "would run ours_d48") && strstr(out, "would run torch_d12_b64"), "runs missing:\n%s", out);
    CHECKF(strstr(out, "| model | B | zerotrain tok/s | MFU |") != NULL, "no table:\n%s", out);
    CHECKF(strstr(out, "| d12 (sample lines) | 16 | 405000 | 32.9% | 2345.6 | 380000 | 30.9% | 9876 | torch.compile | 1.07 |") != NULL,
           "the sample row is not what the sample lines give:\n%s", out);
}
