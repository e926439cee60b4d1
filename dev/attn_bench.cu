// dev/attn_bench.cu — attention TFLOP/s on one GPU: ours (ops/attention.cuh, through the same
// dispatchers the model calls), forward and backward, printed in the format dev/attn_bench.sh
// puts beside PyTorch's SDPA (dev/attn_bench_torch.py). Built and run by dev/attn_bench.sh.
//
//   ./attn_bench B NH T HS     prints:  ours fwd_ms X bwd_ms Y fwd_tflops A bwd_tflops B kernels K
//   ./attn_bench B NH T HS L   then also packed rows (examples of L tokens each, a segment table):
//                              their times as a fraction of the causal times measured in the same run,
//                              beside the fraction of tiles the tensor-core walks visit (attention_tc_tiles)
//
// FLOPs are the ideal causal FlashAttention counts, the same for both programs: forward
// 2·B·NH·T²·HS (QK^T and PV, 2·T²·HS each, half of the T² pairs visible), backward 2.5× that
// (five products where the forward has two). Our backward's separate dQ pass recomputes S and dP
// (seven products): that extra work is not credited. The backward time includes the D = rowsum(dO∘O) pass.
#define TESTING
#include "../train_gpt.cu" // defines: op_attention_forward, op_attention_backward, cuda_init, dev_alloc

int main(int argc, char** argv) {
    if (argc != 5 && argc != 6) { fprintf(stderr, "usage: %s B NH T HS [L]\n", argv[0]); return 2; }
    int B = atoi(argv[1]), NH = atoi(argv[2]), T = atoi(argv[3]), HS = atoi(argv[4]), C = NH * HS;
    int L = argc == 6 ? atoi(argv[5]) : 0; // packed examples of L tokens (0: causal only)
    if (B <= 0 || NH <= 0 || T <= 0 || HS <= 0 || HS > ATT_MAX_HS || L < 0) { fprintf(stderr, "attn_bench: bad shape\n"); return 2; }
    cuda_init(0);
    g_device = DEV_CUDA;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    floatX *qkv, *out, *dout, *dqkv;
    float* lse;
    cudaCheck(cudaMalloc(&qkv, nqkv * sizeof(floatX)));
    cudaCheck(cudaMalloc(&dqkv, nqkv * sizeof(floatX)));
    cudaCheck(cudaMalloc(&out, nout * sizeof(floatX)));
    cudaCheck(cudaMalloc(&dout, nout * sizeof(floatX)));
    cudaCheck(cudaMalloc(&lse, nlse * sizeof(float)));
    g_work_floats = attention_workspace_floats(B, T, NH, NH, HS); // D (B, NH, T): multi-head, dK/dV never split
    cudaCheck(cudaMalloc(&g_work, g_work_floats * sizeof(float)));
    // inputs ~ N(0, 1) rounded to the storage type (made on the host: the bench is not about init)
    floatX* h = (floatX*)malloc(nqkv * sizeof(floatX));
    for (size_t i = 0; i < nqkv; i++) h[i] = rn((float)rng_normal(rng_key(1, 0, 0), i));
    cudaCheck(cudaMemcpy(qkv, h, nqkv * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dout, h, nout * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaDeviceSynchronize());
    free(h);
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    const int warm = 3, reps = 20;
    // ms[0], ms[1] = forward, backward milliseconds with the segment table seg (device; NULL: causal)
    auto time_both = [&](const int* seg, float ms[2]) {
        for (int pass = 0; pass < 2; pass++) {
            for (int r = 0; r < warm + reps; r++) {
                if (r == warm) cudaCheck(cudaEventRecord(e0, g_stream));
                if (pass == 0) op_attention_forward(out, lse, qkv, seg, B, T, NH, NH, C / NH);
                else op_attention_backward(dqkv, dout, qkv, out, lse, seg, B, T, NH, NH, C / NH);
            }
            cudaCheck(cudaEventRecord(e1, g_stream));
            cudaCheck(cudaEventSynchronize(e1));
            cudaCheck(cudaEventElapsedTime(&ms[pass], e0, e1));
            ms[pass] /= reps;
        }
    };
    float ms[2];
    time_both(NULL, ms);
    double fwd = 2.0 * B * NH * (double)T * T * HS, bwd = 2.5 * fwd;
    printf("ours fwd_ms %.4f bwd_ms %.4f fwd_tflops %.1f bwd_tflops %.1f kernels %s\n", ms[0], ms[1],
           fwd / (ms[0] * 1e-3) / 1e12, bwd / (ms[1] * 1e-3) / 1e12,
           attention_uses_tc(T, C / NH, out, lse, qkv, dqkv) ? "tensor-core" : "scalar");
    if (L > 0) { // every row: examples of L tokens, the last one cut at T
        int* hseg = (int*)malloc(sizeof(int) * B * T);
        for (int i = 0; i < B * T; i++) hseg[i] = i % T / L * L;
        int* seg;
        cudaCheck(cudaMalloc(&seg, sizeof(int) * B * T));
        cudaCheck(cudaMemcpy(seg, hseg, sizeof(int) * B * T, cudaMemcpyHostToDevice));
        float pms[2];
        time_both(seg, pms);
        int64_t f0, kv0, f, kv;
        attention_tc_tiles(NULL, T - T % FA_TILE, HS, &f0, &kv0);
        attention_tc_tiles(hseg, T - T % FA_TILE, HS, &f, &kv);
        printf("packed L %d fwd_ms %.4f bwd_ms %.4f time/causal fwd %.3f bwd %.3f tiles/causal fwd %.3f dkdv %.3f\n", L,
               pms[0], pms[1], pms[0] / ms[0], pms[1] / ms[1], (double)f / f0, (double)kv / kv0);
        free(hseg);
        cudaCheck(cudaFree(seg));
    }
    return 0;
}
