#!/usr/bin/env python3
"""test/cuda_emu/mutants.py — does the emulated GPU suite catch the bugs CUDA code typically has?

    python3 test/cuda_emu/mutants.py            # every mutant (about 5 minutes on 2 cores)
    python3 test/cuda_emu/mutants.py NAME...    # some of them

Each mutant is one small change to the real CUDA sources — a missing barrier, a wrong transpose,
an out-of-bounds index, host code reading device memory, ... — applied to a copy of the working
tree in a scratch directory; there test/test_emu is built and the test cases named with it are run.
A mutant is "caught" when a case fails or the emulator stops the run. Not part of `make test`
(each mutant is a build); run it after changing test/cuda_emu/ to see that the checks still bite.
"""
import os
import shutil
import subprocess
import sys
import tempfile

# name: (file, original text, mutated text, test filter, what the bug is)
MUTANTS = {
    'upload_not_ready_kept': (
        'device.cuh',
        '                (void)cudaGetLastError();   // this thread', '                ;   // this thread',
        'gpu_uploads_ahead_of_the_gpu', 'dev_upload leaves cudaEventQuery\'s cudaErrorNotReady as the last error (issue 42, L1)'),
    'nccl_watch_in_one_record': (
        'zero.h',
        'CommWatch* w = &c->watch[c->watch_next % COMM_WATCHES];\n    pthread_mutex_lock(&c->mu);\n    int busy = w->pending && w->recorded;',
        'CommWatch* w = &c->watch[0];\n    pthread_mutex_lock(&c->mu);\n    int busy = 0;',
        'multirank_nccl_watchdog_warm_up', 'the next collective takes over the watch of one the GPU has not done (issue 42: a hang named late, as a later block)'),
    'nccl_connects_lazily': (
        'zero.h',
        'setenv("NCCL_RUNTIME_CONNECT", "0", 0);', ';',
        'multirank_cuda_zero_stages', 'NCCL connects its large-message buffers at the first step, outside the memory baseline (issue 42)'),
    'attention_missing_barrier': (
        'ops/attention.cuh',
        '        __syncthreads(); // K_j, V_j, P~_ij are used up before the next tile overwrites them\n', '',
        'gpu_attention_hs12', 'forward: the next key tile overwrites K_j, V_j while other warps still read them'),
    'attention_dq_missing_barrier': (
        'ops/attention.cuh',
        '        __syncthreads(); // K_j, V_j, dS are used up before the next tile overwrites them\n', '',
        'gpu_attention_hs12', 'backward dQ: the same, in the dQ kernel'),
    'attention_gqa_dkdv_first_head_only': (
        'ops/attention.cuh',
        'steps = (NH / NKV) * nit;', 'steps = nit;',
        'gpu_attention_tc_gqa_hs64', 'tensor-core dK/dV: the group sum stops after its first query head'),
    'attention_gqa_wrong_kv_head': (
        'ops/attention.cuh',
        'int bh = blockIdx.x, b = bh / NH, h = bh % NH, kh = h / (NH / NKV);\n    int q0 = (gridDim.y - 1 - blockIdx.y) * Br;',
        'int bh = blockIdx.x, b = bh / NH, h = bh % NH, kh = h % NKV;\n    int q0 = (gridDim.y - 1 - blockIdx.y) * Br;',
        'gpu_attention_gqa', 'scalar forward: query head h reads kv head h % NKV (interleaved) instead of h / (NH/NKV)'),
    'classifier_missing_barrier': (
        'ops/classifier.cuh',
        '    __syncthreads(); // every warp has read scratch before the next reduction writes it\n', '',
        'gpu_classifier_gpt2', 'block reduction: the sum overwrites the max in shared memory before every warp read it'),
    'sumsq_missing_barrier': (
        'adamw.cuh',
        "        __syncthreads(); // this level's sums are written before the next level reads them\n"
        '    }\n    if (threadIdx.x == 0) part[c]',
        '    }\n    if (threadIdx.x == 0) part[c]',
        'gpu_sumsq', 'tree reduction without a barrier between levels'),
    'biasgrad_missing_barrier': (
        'ops/matmul.cuh',
        '    for (int j = 0; j < PACK_X; j++) if (j < W) lane_sum[threadIdx.y][threadIdx.x * W + j] = acc[j];\n    __syncthreads(); // lane_sum is complete\n',
        '    for (int j = 0; j < PACK_X; j++) if (j < W) lane_sum[threadIdx.y][threadIdx.x * W + j] = acc[j];\n',
        'gpu_matmul_odd', 'bias gradient: row 0 adds the other rows\' sums before they are written'),
    'biasgrad_divergent_barrier': (
        'ops/matmul.cuh',
        '    for (int j = 0; j < PACK_X; j++) if (j < W) lane_sum[threadIdx.y][threadIdx.x * W + j] = acc[j];\n    __syncthreads(); // lane_sum is complete\n',
        '    for (int j = 0; j < PACK_X; j++) if (j < W) lane_sum[threadIdx.y][threadIdx.x * W + j] = acc[j];\n    if (c0 < OC) __syncthreads(); // lane_sum is complete\n',
        'gpu_matmul_odd', '__syncthreads inside a condition that differs across the block'),
    'layernorm_partial_warp_exit': (
        'ops/layernorm.cuh',
        '    if (i >= N) return; // the whole warp leaves together: the shuffles below see 32 lanes\n',
        '    if (i >= N && lane == 0) return;\n',
        'gpu_layernorm_forward', 'a shuffle with a full mask after some lanes of the warp returned'),
    'matmul_wrong_transpose': (
        'ops/matmul.cuh',
        'cuda_gemm(1, 0, OC, N, C, weight, C, inp, C, d, OC, bias, 0);',
        'cuda_gemm(0, 0, OC, N, C, weight, C, inp, C, d, OC, bias, 0);',
        'gpu_matmul_odd', 'forward GEMM without op(A) = A^T: the row-/column-major mapping broken'),
    'matmul_wrong_ld': (
        'ops/matmul.cuh',
        'cuda_gemm(0, 1, C, OC, N, inp, C, dout, OC, dweight, C, NULL, 1);',
        'cuda_gemm(0, 1, C, OC, N, inp, C, dout, OC, dweight, OC, NULL, 1);',
        'gpu_matmul_odd', 'weight-gradient GEMM with the wrong leading dimension of D'),
    'matmul_beta_one': (
        'ops/matmul.cuh',
        'const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;',
        'const float alpha = 1.0f, beta = 1.0f;',
        'gpu_matmul_odd', 'forward and dinp GEMMs add to their output instead of writing it'),
    'matmul_bias_type': (
        'ops/matmul.cuh',
        'int32_t bias_type = CUDA_R_FLOATX;', 'int32_t bias_type = CUDA_R_32F;',
        'gpu_matmul_gpt2', 'a bias type cuBLASLt does not accept with a BF16 D (the GEMM falls back or fails)'),
    # tensor-core attention (ops/attention.cuh, ops/tensor_core.cuh): the strictness cases
    'tc_wrong_fragment_index': (
        'ops/attention.cuh',
        'uint32_t a[4] = {tc_pack_bf16(P[2 * kk][0], P[2 * kk][1]), tc_pack_bf16(P[2 * kk][2], P[2 * kk][3]),',
        'uint32_t a[4] = {tc_pack_bf16(P[2 * kk][0], P[2 * kk][1]), tc_pack_bf16(P[2 * kk + 1][0], P[2 * kk + 1][1]),',
        'gpu_attention_tc_hs64', 'P as an A fragment: register 1 taken from the next n-tile (rows g / g+8 confused with cols)'),
    'tc_wrong_ldmatrix_row': (
        'ops/attention.cuh',
        'tc_ldmatrix_x4(b, B + (n0 + lane % 8 + 8 * (lane / 16)) * ld + k0 + 8 * ((lane / 8) % 2));',
        'tc_ldmatrix_x4(b, B + (n0 + lane % 8 + 8 * ((lane / 8) % 2)) * ld + k0 + 8 * (lane / 16));',
        'gpu_attention_tc_hs64', 'K as a B operand: the lanes\' row addresses of the two n-tiles and k-halves swapped'),
    'tc_missing_wait': (
        'ops/attention.cuh',
        '            tc_cp_async_wait<1>(); // all but that newest group have landed: Q_i, K_j, V_j\n', '',
        'gpu_attention_tc_hs64', 'forward: the next tile\'s copy issued, this tile\'s never waited for'),
    'tc_wait_too_few': (
        'ops/attention.cuh',
        '            tc_cp_async_wait<1>(); // all but that newest group have landed\n        } else {\n            tc_cp_async_wait<0>();\n        }\n        __syncthreads(); // every thread\'s copies of Q_i',
        '            tc_cp_async_wait<2>(); // all but that newest group have landed\n        } else {\n            tc_cp_async_wait<0>();\n        }\n        __syncthreads(); // every thread\'s copies of Q_i',
        'gpu_attention_tc_hs64', 'dK/dV: wait_group 2 where 1 is needed (the current tile may still be in flight)'),
    'tc_missing_barrier_before_prefetch': (
        'ops/attention.cuh',
        '        __syncthreads(); // every warp is done with K_j, V_j before the next prefetch overwrites them\n    }\n    // lines 12, 14',
        '    }\n    // lines 12, 14',
        'gpu_attention_tc_hs64', 'forward: the prefetch overwrites K_j, V_j while other warps still read them'),
    'tc_mask_off_by_one': (
        'ops/attention.cuh',
        'int masked = (j == qt && col > row) || (SEG && j * FA_TILE + col < lo[i / 2]);\n                S[n][i] =',
        'int masked = (j == qt && col >= row) || (SEG && j * FA_TILE + col < lo[i / 2]);\n                S[n][i] =',
        'gpu_attention_tc_hs64', 'forward: the causal mask hides the diagonal (each query\'s own key)'),
    'tc_dq_skips_diagonal': (
        'ops/attention.cuh',
        '    for (int j = j0; j <= qt; j++) { // causal: key tiles past the query tile are skipped whole\n        bf16_t* Kj = Ks + ((j - j0) % 2) * FA_TILE * ld;\n        bf16_t* Vj = Vs + ((j - j0) % 2) * FA_TILE * ld;\n        if (j < qt) { // line 6',
        '    for (int j = j0; j < qt; j++) { // causal: key tiles past the query tile are skipped whole\n        bf16_t* Kj = Ks + ((j - j0) % 2) * FA_TILE * ld;\n        bf16_t* Vj = Vs + ((j - j0) % 2) * FA_TILE * ld;\n        if (j < qt) { // line 6',
        'gpu_attention_tc_hs64', 'dQ: the diagonal key tile skipped along with those above it'),
    # packed examples (a segment table, issue 25)
    'tc_seg_dkdv_unmasked': (
        'ops/attention.cuh',
        'int masked = (diag && it * BC + col < key) || (SEG && Sgi[col] > key);',
        'int masked = (diag && it * BC + col < key) || (SEG && Sgi[col] > key + 64);',
        'gpu_attention_tc_seg_hs64', 'dK/dV: queries of the next example still see the last keys of this one'),
    'tc_seg_empty_row': (
        'ops/attention.cuh',
        'float mexp = SEG && mx == -INFINITY ? 0.0f : mx;', 'float mexp = mx;',
        'gpu_attention_tc_seg_hs64', 'forward: a row whose example starts in a later key tile takes exp(-inf - -inf) = NaN'),
    'seg_walk_stops_early': (
        'ops/attention.cuh',
        'while (it < nq && sg[it * bc] <= klast) it++;', 'while (it < nq && sg[it * bc] < klast) it++;',
        'gpu_attention_seg', 'dK/dV: the walk stops before a query tile whose example starts at the block\'s last key'),
    # the emulator's instructions themselves: a wrong layout must fail the instruction tests
    'emu_mma_b_layout': (
        'test/cuda_emu/cuda_emu.h',
        'for (int i = 0; i < 4; i++) B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = bf16_bits(in->b[i / 2], i % 2);',
        'for (int i = 0; i < 4; i++) B[2 * t + (i >> 1) + (i & 1 ? 8 : 0)][g] = bf16_bits(in->b[i / 2], i % 2);',
        'gpu_tc_mma_layout', 'mma: B fragment rows k = 2t + i&1 (+8) read as 2t + i/2 (+8 for odd i)'),
    'emu_ldmatrix_trans': (
        'test/cuda_emu/cuda_emu.h',
        'int row = trans ? 2 * (lane % 4) + h : lane / 4, col = trans ? lane / 4 : 2 * (lane % 4) + h;',
        'int row = trans ? lane / 4 : lane / 4, col = trans ? 2 * (lane % 4) + h : 2 * (lane % 4) + h;',
        'gpu_tc_ldmatrix_layout', 'ldmatrix: .trans ignored'),
    'emu_cp_async_lands_early': (
        'test/cuda_emu/cuda_emu.h',
        '    if (w->cp_at_issue) { memcpy(dst, src, (size_t)bytes); return; }\n',
        '    { memcpy(dst, src, (size_t)bytes); return; }\n',
        'gpu_tc_cp_async_groups', 'cp.async: every copy lands at issue (a missing wait could never show)'),
    # issue 20: what the review found, and the emulator lessons (each passed the emulator before them)
    'watchdog_no_set_device': (
        'zero.h',
        '    cudaCheck(cudaSetDevice(g_cuda_device));\n    while (!c->watchdog_stop) {\n', '    while (!c->watchdog_stop) {\n',
        'multirank_nccl_watchdog', 'the NCCL watchdog thread calls CUDA on GPU 0 (rank 1 runs on emulated GPU 1)'),
    'tokens_pageable': (
        'train_gpt.cu',
        '    dev_upload(m->a.inputs, dl->inputs, bytes);', '    dev_from_host(m->a.inputs, dl->inputs, bytes);',
        'emu_host_syncs_per_step', 'token upload from pageable memory: a possible host wait per micro-step'),
    'upload_slot_reused_early': (
        'device.cuh',
        '        unsigned char* src = u->pinned + (size_t)k * u->slot;', '        unsigned char* src = u->pinned;',
        'emu_host_syncs_per_step', 'every upload through one page-locked slot: the next overwrites it before the copy is known done'),
    'shared_not_aligned': (
        'ops/attention.cuh',
        '    extern __shared__ __align__(16) float fa_smem[]; // 16-byte cp.async and ldmatrix rows\n    bf16_t* Qs = (bf16_t*)fa_smem;        // (FA_TILE, ld) Q_i\n    bf16_t* Ks',
        '    extern __shared__ float fa_smem[]; // 16-byte cp.async and ldmatrix rows\n    bf16_t* Qs = (bf16_t*)fa_smem;        // (FA_TILE, ld) Q_i\n    bf16_t* Ks',
        'gpu_attention_tc_hs64', 'forward: a float array (4-byte alignment) feeding 16-byte cp.async and ldmatrix'),
    'classifier_shared_not_aligned': (
        'ops/classifier.cuh',
        '    extern __shared__ __align__(16) float classifier_smem[];', '    extern __shared__ float classifier_smem[];',
        'gpu_classifier_paths_bitwise', 'the classifier\'s row in shared memory declared float (4-byte alignment), copied 16 bytes at a time'),
    'emu_resources_unchecked': (
        'test/cuda_emu/cuda_emu.h',
        '    else e = check_resources(name, (const void*)kernel, threads, smem, param_bytes<P...>());\n', '',
        'gpu_kernel_resources_launch_check', 'the emulator without nvcc\'s resource table: 1024 threads x 96 registers launch'),
    'nccl_issue_unlocked': (
        'zero.h',
        '        nccl_lock(c);                                                                                 \\\n        ncclResult_t issued_ = (expr);                                                                \\\n        nccl_unlock(c);                                                                               \\\n',
        '        ncclResult_t issued_ = (expr);                                                                \\\n',
        'multirank_cuda_zero_stages', 'collectives issued without the NCCL lock, while the watchdog polls (caught when they overlap)'),
    'attention_no_smem_attribute': (
        'ops/attention.cuh',
        '    cudaCheck(cudaFuncSetAttribute(attention_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fwd));\n',
        '', 'gpu_attention_hs128', 'over 48 KiB of dynamic shared memory without cudaFuncSetAttribute'),
    'encoder_sort_bits': (
        'ops/encoder.cuh',
        'while (end_bit < 32 && ((int64_t)1 << end_bit) < K) end_bit++;', 'end_bit = 8 + 0 * K;',
        'gpu_encoder', 'the radix sort looks at too few key bits: tokens grouped wrongly, rows written twice'),
    'encoder_temp_storage': (
        'ops/encoder.cuh',
        'cudaCheck(cub::DeviceRadixSort::SortPairs(temp, temp_bytes,',
        'temp_bytes -= 300; cudaCheck(cub::DeviceRadixSort::SortPairs(temp, temp_bytes,',
        'gpu_encoder', 'less temporary storage than CUB asked for'),
    'encoder_out_of_bounds': (
        'ops/encoder.cuh',
        '    if (idx >= N * packs_per_row) return;\n    int64_t bt', '    if (idx > N * packs_per_row + 200) return;\n    int64_t bt',
        'gpu_encoder', 'a bounds check that lets threads past the end write'),
    'gelu_vector_unaligned': (
        'ops/matmul.cuh',
        '    int vec = aligned16(out) && aligned16(pre);\n    gelu_forward_kernel', '    int vec = 1;\n    gelu_forward_kernel',
        'gpu_vector_paths', 'the 16-byte path taken without checking the pointers\' alignment'),
    'layernorm_vector_odd_rows': (
        'ops/layernorm.cuh',
        '    int vec = C % PACK_X == 0 && aligned16(dinp)', '    int vec = aligned16(dinp)',
        'gpu_layernorm_backward', 'the 16-byte path on rows whose length is not a multiple of the pack (rows misaligned)'),
    'layernorm_bwd_missing_barrier': (
        'ops/layernorm.cuh',
        "    __syncthreads(); // every lane's sums are in shared memory\n", '',
        'gpu_layernorm_backward', 'dweight/dbias: lane 0 adds the other lanes\' column sums before they are written'),
    'encoder_pieces_order': (
        'ops/encoder.cuh',
        'for (int h = g + 1; h <= last; h++) acc = __fadd_rn(acc, pieces[(int64_t)(2 * h) * C + c]);',
        'for (int h = last; h > g; h--) acc = __fadd_rn(acc, pieces[(int64_t)(2 * h) * C + c]);',
        'gpu_encoder', 'a frequent token\'s pieces added in another order than the CPU\'s (not bitwise)'),
    'encoder_piece_lost': (
        'ops/encoder.cuh',
        '    while ((last + 1) * ENC_CHUNK < N && key[(last + 1) * ENC_CHUNK] == v) last++;\n', '',
        'gpu_encoder', 'a run crossing several chunk edges adds only its first two pieces'),
    'adamw_contracted': (
        'adamw.cuh',
        '*vi = __fmaf_rn(beta2, __fsub_rn(v, gg), gg);', '*vi = __fmaf_rn(beta2, v - g * g, gg);',
        'gpu_adamw', 'plain arithmetic where the CPU\'s rounding must be kept: nvcc fuses it into an FMA'),
    'adamw_max_missing_barrier': (
        'adamw.cuh',
        '    if (bad) red_bad = 1;\n    __syncthreads();\n', '    if (bad) red_bad = 1;\n',
        'gpu_adamw_bound_proves', 'the maxima fold: thread 0 reads the other warps\' maxima before they are written'),
    'adamw_bound_ignores_lr': (
        'adamw.cuh',
        'upd = lr * (u + dec)', 'upd = (lr > 0) * (u + dec)',
        'gpu_adamw_bound_proves', 'the bound forgets the learning rate: an overflowing update is proved finite and lands'),
    'nccl_warm_up_unwatched': (
        'zero.h',
        '    s->pending = 1; s->recorded = 0; s->warm_up = 1; s->step = 0; s->t_issued = wall_s();\n',
        '    s->recorded = 0; s->warm_up = 1; s->step = 0; s->t_issued = wall_s();\n',
        'multirank_nccl_watchdog_warm_up_and_abort', 'the NCCL warm-up not watched: a peer that stops right after init hangs the run'),
    'matmul_fixed_plan_table': (
        'ops/matmul.cuh',
        'int cap = g_matmul_cap ? 2 * g_matmul_cap : 64;',
        'int cap = g_matmul_cap ? 2 * g_matmul_cap : 64; if (cap > 128) die(1, "more than 128 matmul shapes");',
        'gpu_matmul_many', 'the GEMM plan table of a fixed size (sampling needs ~5 plans per sequence length)'),
    'test_legacy_stream_fill': (
        'test/test_gpu.cu',
        '    cudaCheck(cudaMemsetAsync(dev, byte, bytes, g_stream));\n    cudaCheck(cudaStreamSynchronize(g_stream));\n',
        '    cudaCheck(cudaMemset(dev, byte, bytes));\n',
        'gpu_layernorm_forward', 'a fill on the legacy default stream, which the ops\' non-blocking stream does not wait for'),
    'host_reads_device_memory': (
        'test/test_gpu.cu',
        '        cudaCheck(cudaStreamSynchronize(g_stream));                    \\\n',
        '        cudaCheck(cudaStreamSynchronize(g_stream)); (void)*(volatile float*)g_work_gpu; \\\n',
        'gpu_fill', 'host code dereferencing a device pointer'),
    'wait_unrecorded_event': (
        'zero.h',
        '    cudaCheck(cudaEventRecord(s->ready, g_stream));\n', '',
        'zero_stages', 'a stream waits on an event nobody recorded (it orders nothing)'),
    'comm_wait_no_event': (
        'zero.h',
        '        cudaCheck(cudaStreamWaitEvent(g_stream, s->done, 0));\n', '',
        'multirank_cuda', 'the compute stream reads gathered parameters without waiting for the collective'),
    'comm_start_no_event': (
        'zero.h',
        '    cudaCheck(cudaStreamWaitEvent(c->stream, s->ready, 0));\n', '',
        'multirank_cuda', 'a collective overwrites a buffer before the compute stream is done with it'),
    'offload_grad_no_event': (
        'offload.h',
        '        if (!nowait) cudaCheck(cudaStreamWaitEvent(o->stream, z->comm->slots[h].done, 0)); // the reduction is done\n', '',
        'offload_emu_grad_copy_faults', 'a gradient shard is copied to the host before its reduce-scatter finished'),
}


def main():
    names = sys.argv[1:] or list(MUTANTS)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    skip = shutil.ignore_patterns('.git', 'build', 'out', 'train', 'train_cpu', 'train_cpu_fp32', 'train_gpu',
                                  'test_bf16', 'test_fp32', 'test_emu', 'test_emu_fp32', 'test_gpu', '__pycache__')
    missed = 0
    for name in names:
        path, old, new, filt, what = MUTANTS[name]
        with tempfile.TemporaryDirectory(prefix='zt_mutant_') as tmp:
            tree = os.path.join(tmp, 'tree')
            shutil.copytree(root, tree, ignore=skip)
            src = open(os.path.join(tree, path)).read()
            if src.count(old) != 1:
                print('%-30s the original text is not in %s (update mutants.py)' % (name, path))
                missed += 1
                continue
            open(os.path.join(tree, path), 'w').write(src.replace(old, new))
            # (the committed resource table: a mutant's nvcc build would take minutes)
            b = subprocess.run('make -s test/test_emu KERNEL_RES=test/cuda_emu/kernel_resources_sm90.h', shell=True, cwd=tree,
                               capture_output=True, text=True)
            if b.returncode:
                print('%-30s does not build:\n%s' % (name, b.stderr[-1500:]))
                missed += 1
                continue
            r = subprocess.run('timeout 600 ./test/test_emu ' + filt, shell=True, cwd=tree, capture_output=True, text=True)
            out = (r.stdout + r.stderr).splitlines()
            emu = [l for l in out if l.startswith('cuda_emu') or l.startswith('error:')]
            fails = [l.strip() for l in out if 'FAIL' in l and not l.startswith('FAIL ')]
            caught = r.returncode != 0
            how = emu[0] if emu else (fails[0] if fails else 'exit code %d' % r.returncode)
            print('%-30s %s  (%s)\n    %s' % (name, 'caught' if caught else 'MISSED', what, how[:300] if caught else ''))
            missed += not caught
    print('%d of %d mutants caught' % (len(names) - missed, len(names)))
    sys.exit(1 if missed else 0)


if __name__ == '__main__':
    main()
