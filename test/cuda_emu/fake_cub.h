// test/cuda_emu/fake_cub.h — the one CUB call zerotrain makes, cub::DeviceRadixSort::SortPairs, on the CPU.
//
// CUB's contract (cub/device/device_radix_sort.cuh): called with d_temp_storage == NULL it only writes
// the temporary storage it needs into temp_storage_bytes; called again with that much device memory it
// sorts the (key, value) pairs by the key bits [begin_bit, end_bit), stably (pairs with equal bits keep
// their input order), into d_keys_out / d_values_out (the whole keys are written, not just the bits).
// The inputs are not modified; outputs, inputs and temporary storage must not overlap.
//
// The size asked for is the formula of CUB's onesweep path (dispatch_radix_sort.cuh, CUDA 13: 8-bit
// digits, tiles of 384 x 21 items, an alternate key and value buffer when there is more than one
// pass, each part rounded to 256 bytes, + 255): CUB's single-tile path for small inputs asks for
// less. The fake fills the temporary storage with garbage, as the real sort overwrites it, so data
// kept there across the call is caught. Unsigned key types only (what we sort).
//
// defines: cub::DeviceRadixSort::SortPairs
#ifndef ZT_FAKE_CUB_H
#define ZT_FAKE_CUB_H

#include "cuda_emu.h"
#include <algorithm>
#include <numeric>

namespace cub {
struct DeviceRadixSort {
    static size_t onesweep_temp_bytes(size_t n, size_t key_size, size_t value_size, int bits) {
        const size_t digits = 256, tile = 384 * 21, portion = ((1u << 28) - 1) / tile * tile;
        size_t passes = (size_t)(bits + 7) / 8, portions = (n + portion - 1) / portion;
        size_t blocks = ((n < portion ? n : portion) + tile - 1) / tile;
        size_t parts[5] = {portions * passes * digits * 4, blocks * digits * 4, passes > 1 ? n * key_size : 0,
                           passes > 1 ? n * value_size : 0, portions * passes * 4};
        size_t total = 0;
        for (size_t p : parts) total += (p + 255) / 256 * 256;
        return total + 255;
    }

    template <class KeyT, class ValueT, class NumItemsT>
    static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const KeyT* d_keys_in, KeyT* d_keys_out,
                                 const ValueT* d_values_in, ValueT* d_values_out, NumItemsT num_items, int begin_bit = 0,
                                 int end_bit = sizeof(KeyT) * 8, cudaStream_t stream = 0) {
        static_assert(std::is_unsigned<KeyT>::value, "the fake sorts unsigned keys only");
        const char* call = "cub::DeviceRadixSort::SortPairs";
        if (num_items < 0 || begin_bit < 0 || end_bit > (int)sizeof(KeyT) * 8 || begin_bit > end_bit)
            return emu::note(cudaErrorInvalidValue, "%s: %lld items, bits [%d, %d)", call, (long long)num_items, begin_bit, end_bit);
        size_t n = (size_t)num_items;
        size_t need = onesweep_temp_bytes(n, sizeof(KeyT), sizeof(ValueT), end_bit - begin_bit);
        if (!d_temp_storage) { temp_storage_bytes = need; return cudaSuccess; }
        if (!emu::stream_ok(stream, call)) return cudaErrorInvalidResourceHandle;
        if (temp_storage_bytes < need)
            return emu::note(cudaErrorInvalidValue, "%s: %zu bytes of temporary storage, %zu needed", call, temp_storage_bytes, need);
        struct Range { const void* p; size_t bytes; const char* what; bool out; };
        Range r[5] = {{d_temp_storage, temp_storage_bytes, "temporary storage", true},
                      {d_keys_in, n * sizeof(KeyT), "keys in", false},
                      {d_keys_out, n * sizeof(KeyT), "keys out", true},
                      {d_values_in, n * sizeof(ValueT), "values in", false},
                      {d_values_out, n * sizeof(ValueT), "values out", true}};
        for (int i = 0; i < 5; i++)
            if (!emu::device_range(r[i].p, r[i].bytes, call, r[i].what)) return cudaErrorInvalidValue;
        for (int i = 0; i < 5; i++)
            for (int j = i + 1; j < 5; j++)
                if ((r[i].out || r[j].out) && r[i].bytes && r[j].bytes && (const char*)r[i].p < (const char*)r[j].p + r[j].bytes &&
                    (const char*)r[j].p < (const char*)r[i].p + r[i].bytes)
                    return emu::note(cudaErrorInvalidValue, "%s: %s and %s overlap", call, r[i].what, r[j].what);
        for (int i = 0; i < 5; i++)
            if (r[i].bytes) emu::stream_access(stream, r[i].p, r[i].out, call);
        // an operation of its stream, checked across streams as a kernel is (by range)
        emu::stream_tick(stream);
        for (int i = 0; i < 5; i++)
            if (r[i].bytes && !r[i].out) emu::cross_stream_check(stream, r[i].p, r[i].bytes, false, call);
        for (int i = 0; i < 5; i++)
            if (r[i].bytes && r[i].out) {
                if (emu::legacy(stream)) emu::cross_stream_check(stream, r[i].p, r[i].bytes, true, call);
                else emu::cross_stream_write(stream, r[i].p, r[i].bytes, call);
            }
        emu::ProfScope prof("cub::DeviceRadixSort::SortPairs (fake)");
        emu::DeviceMode dm;
        KeyT mask = end_bit - begin_bit >= (int)sizeof(KeyT) * 8 ? (KeyT)~(KeyT)0 : (KeyT)(((KeyT)1 << (end_bit - begin_bit)) - 1);
        std::vector<size_t> order(n);
        std::iota(order.begin(), order.end(), (size_t)0);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return ((d_keys_in[a] >> begin_bit) & mask) < ((d_keys_in[b] >> begin_bit) & mask);
        });
        for (size_t i = 0; i < n; i++) {
            d_keys_out[i] = d_keys_in[order[i]];
            d_values_out[i] = d_values_in[order[i]];
        }
        memset(d_temp_storage, 0xA5, temp_storage_bytes);
        return cudaSuccess;
    }
};
} // namespace cub

#endif // ZT_FAKE_CUB_H
