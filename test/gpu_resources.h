// test/gpu_resources.h — nvcc's resource table (registers, shared memory, spills per kernel, sm_90;
// test/cuda_emu/resources.py) as the emulator checks it (included by test/test_gpu.cu, emulator only).
#ifndef ZT_GPU_RESOURCES_H
#define ZT_GPU_RESOURCES_H

// Kernels allowed to spill, with the reason (none today: a spill is a local-memory round trip per use
// inside the hottest loops; where one ever is the cheaper choice, it is written here with its bytes).
static const struct { const char* kernel; int bytes; const char* why; } g_spill_budget[] = {{NULL, 0, NULL}};

// Every kernel nvcc compiled for sm_90 keeps its values in registers (no spill stores or loads) unless
// g_spill_budget allows it, and the tensor-core attention kernels' occupancy (README "Attention on
// tensor cores", docs/cuda.md) follows from their registers and shared memory.
TEST(gpu_kernel_resources_no_spills) {
    if (emu::g_resources.empty()) TEST_SKIP("no resource table: this emulator was built without nvcc");
    int n = 0, bad = 0;
    for (auto& kv : emu::g_resources) {
        const emu::KernelResources& r = kv.second;
        n++;
        int allowed = 0;
        for (int i = 0; g_spill_budget[i].kernel; i++)
            if (!strcmp(g_spill_budget[i].kernel, r.name)) allowed = g_spill_budget[i].bytes;
        if (r.spill_st + r.spill_ld > allowed || r.regs > 255) {
            printf("    %s: %d registers, %d bytes spill stores, %d bytes spill loads (budget %d)\n", r.name, r.regs,
                   r.spill_st, r.spill_ld, allowed);
            bad++;
        }
    }
    CHECKF(bad == 0, "%d of %d kernels spill registers (nvcc --resource-usage, sm_90: build/gpu/ptxas.log)", bad, n);
#ifndef ENABLE_FP32
    // occupancy of the tensor-core kernels: blocks per SM by registers (per warp, in units of 256) and by
    // shared memory (228 KiB an SM, 1 KiB reserved per block), FA_THREADS threads each
    // (each causal, and with a segment table: "+seg")
    const struct { const void* fn; const char* what; int HS; size_t smem; } tc[] = {
        {(const void*)attention_forward_tc_kernel<64, false>, "forward", 64, fa_smem_bytes(64, 0)},
        {(const void*)attention_forward_tc_kernel<128, false>, "forward", 128, fa_smem_bytes(128, 0)},
        {(const void*)attention_backward_dkdv_tc_kernel<64, false>, "dK/dV", 64, fa_smem_dkdv_bytes(64)},
        {(const void*)attention_backward_dkdv_tc_kernel<128, false>, "dK/dV", 128, fa_smem_dkdv_bytes(128)},
        {(const void*)attention_backward_dq_tc_kernel<64, false>, "dQ", 64, fa_smem_bytes(64, 1)},
        {(const void*)attention_backward_dq_tc_kernel<128, false>, "dQ", 128, fa_smem_bytes(128, 1)},
        {(const void*)attention_forward_tc_kernel<64, true>, "fwd+seg", 64, fa_smem_bytes(64, 0)},
        {(const void*)attention_forward_tc_kernel<128, true>, "fwd+seg", 128, fa_smem_bytes(128, 0)},
        {(const void*)attention_backward_dkdv_tc_kernel<64, true>, "dKV+seg", 64, fa_smem_dkdv_bytes(64)},
        {(const void*)attention_backward_dkdv_tc_kernel<128, true>, "dKV+seg", 128, fa_smem_dkdv_bytes(128)},
        {(const void*)attention_backward_dq_tc_kernel<64, true>, "dQ+seg", 64, fa_smem_bytes(64, 1)},
        {(const void*)attention_backward_dq_tc_kernel<128, true>, "dQ+seg", 128, fa_smem_bytes(128, 1)},
    };
    for (auto& k : tc) {
        auto it = emu::g_resources.find(k.fn);
        CHECKF(it != emu::g_resources.end(), "%s HS %d: not in the resource table", k.what, k.HS);
        if (it == emu::g_resources.end()) continue;
        int regs = it->second.regs, warps = FA_THREADS / 32;
        int per_warp = (regs * 32 + 255) / 256 * 256;
        int by_regs = 65536 / (per_warp * warps), by_smem = (int)((228 << 10) / (k.smem + 1024));
        int blocks = by_regs < by_smem ? by_regs : by_smem;
        printf("    %-7s HS %3d: %3d registers, %6zu B shared: %d blocks/SM by registers, %d by shared memory -> %2d warps/SM\n",
               k.what, k.HS, regs, k.smem, by_regs, by_smem, blocks * warps);
        CHECKF(blocks >= 2, "%s HS %d: %d block per SM: nothing overlaps its loads", k.what, k.HS, blocks);
    }
#endif
}

// The launch check bites: a 1024-thread kernel whose registers (here a planted 96 a thread, as nvcc
// may use without __launch_bounds__) do not fit an SM fails to launch with cudaErrorLaunchOutOfResources,
// as on a GPU; with nvcc's own count it launches.
TEST(gpu_kernel_resources_launch_check) {
    if (emu::g_resources.empty()) TEST_SKIP("no resource table: this emulator was built without nvcc");
    auto it = emu::g_resources.find((const void*)loss_add_kernel);
    CHECKF(it != emu::g_resources.end(), "loss_add_kernel is not in the resource table");
    if (it == emu::g_resources.end()) return;
    StepScalars* sc = (StepScalars*)gpu_zeros(sizeof(StepScalars));
    float* losses = (float*)gpu_zeros(64 * sizeof(float));
    int regs = it->second.regs;
    cudaError_t e[2];
    for (int planted = 0; planted < 2; planted++) {
        it->second.regs = planted ? 96 : regs;
        loss_add_kernel<<<1, LOSS_THREADS, 0, g_stream>>>(sc, losses, 64);
        e[planted] = cudaGetLastError();
    }
    it->second.regs = regs;
    printf("    loss_add_kernel, %d threads: %d registers (nvcc): %s; 96 registers: %s\n", LOSS_THREADS, regs,
           cudaGetErrorString(e[0]), cudaGetErrorString(e[1]));
    CHECK(e[0] == cudaSuccess && e[1] == cudaErrorLaunchOutOfResources);
    cudaCheck(cudaStreamSynchronize(g_stream));
    cudaCheck(cudaFree(sc)); cudaCheck(cudaFree(losses));
}

#endif // ZT_GPU_RESOURCES_H
