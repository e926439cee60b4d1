// test/gpu_multirank.h — the CUDA device with several ranks (included by test/test_gpu.cu): each
// case starts this binary as the trainer under mpirun, one process per rank.
#include "zero_runs.h" // defines: ZT_MODEL, zt_data, zt_mpirun, zt_dir, ZtLog, zt_read_log

// One rank on the CPU device, one on the CUDA device: the flag/build check runs before any
// communicator is made, so both ranks stop with the message (a rank in NCCL's init would wait for
// its partner forever), and no rank reaches the device's communicator set-up.
TEST(multirank_device_mismatch_stops_before_nccl) {
    char cmd[8192], out[1 << 16];
    snprintf(cmd, sizeof(cmd),
             ZT_CLEAN_ENV "OMP_NUM_THREADS=1 timeout 60 mpirun --oversubscribe --allow-run-as-root -np 1 %s --train -threads 1 -i %s "
             ZT_MODEL " -b 2 -x 1 -device cpu : -np 1 %s --train -threads 1 -i %s " ZT_MODEL " -b 2 -x 1 -device cuda",
             g_test_self, zt_data(0), g_test_self, zt_data(0));
    double t0 = test_now_s();
    int rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc != 0 && rc != 124, "mismatched devices: exit %d (124: hung until the timeout)\n%s", rc, out);
    CHECKF(strstr(out, "rank 1 was started with different flags, another device") != NULL, "no message:\n%s", out);
    CHECKF(strstr(out, "NCCL") == NULL && strstr(out, "step ") == NULL, "a rank went past the check:\n%s", out);
    printf("    both ranks stopped in %.1f s\n", test_now_s() - t0);
}
