#!/usr/bin/env python3
"""dev/nf4_bnb_check.py — ops/nf4.cuh against bitsandbytes' own compiled code (libbitsandbytes_cpu.so).

bitsandbytes needs torch >= 2.4 to import, so this loads only its CPU library through ctypes (numpy
arrays) and calls the C functions bitsandbytes' CPU backend calls (csrc/pythonInterface.cpp):
  cdequantize_blockwise_cpu_fp32(float* code, uint8* A, const float* absmax, float* out, i64 blocksize, i64 n)
  cquantize_blockwise_cpu_fp32(float* code, float* A, float* absmax, uint8* out, i64 blocksize, i64 n)
  cdequantize_blockwise_cpu_nf4_fp32 / _bf16(uint8* A, const float* absmax, T* out, i64 blocksize, i64 m, i64 n)
For each DIR/case_*.f32 that test nf4_vs_bitsandbytes quantized (DIR/case_*.nf4: our storage; .deq: our
FP32 dequantization; .abs: our FP32 block absmax; .bf16: op_nf4_dequant in the BF16 build):
  1. their 8-bit dequant of our absmax codes and nested absmax, + our offset (torch's `absmax += offset`
     in float32) = our block absmax, bit for bit;
  2. their NF4 dequant of our codes with that absmax = our FP32 values (and BF16 values), bit for bit;
  3. their blockwise quantization (blocksize 256, the dynamic map) of (absmax - our offset) = our absmax
     codes and nested absmax, the absmax being bnb's torch rule (dev/nf4_reference.py quantize_4bit,
     itself checked bitwise against ours by test nf4_vs_reference).
And DIR/sweep8.f32 (written here by --make-sweep; our codes in .q8, nested absmax in .a8): every float
within 64 ulps of each point where the 8-bit rule's table changes code, plus random values, through
cquantize_blockwise_cpu_fp32 = ours.

Usage: nf4_bnb_check.py LIB --make-sweep DIR | nf4_bnb_check.py LIB --check DIR     (exit 0: all equal)
"""
import ctypes as ct
import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nf4_reference as ref  # noqa: E402

f32 = np.float32
P = lambda a: a.ctypes.data_as(ct.c_void_p)
LL = ct.c_longlong


def load(path):
    lib = ct.CDLL(path)
    for name in ("cdequantize_blockwise_cpu_fp32", "cquantize_blockwise_cpu_fp32",
                 "cdequantize_blockwise_cpu_nf4_fp32", "cdequantize_blockwise_cpu_nf4_bf16"):
        getattr(lib, name).restype = None
    return lib


def bnb_quantize_blockwise(lib, x, blocksize=256):
    x = np.ascontiguousarray(x, np.float32)
    n = x.size
    out = np.zeros(n, np.uint8)
    absmax = np.zeros(-(-n // blocksize), np.float32)
    code = ref.DYN.copy()
    lib.cquantize_blockwise_cpu_fp32(P(code), P(x), P(absmax), P(out), LL(blocksize), LL(n))
    return out, absmax


def bnb_dequantize_blockwise(lib, q, absmax, blocksize=256):
    q = np.ascontiguousarray(q, np.uint8)
    absmax = np.ascontiguousarray(absmax, np.float32)
    out = np.zeros(q.size, np.float32)
    code = ref.DYN.copy()
    lib.cdequantize_blockwise_cpu_fp32(P(code), P(q), P(absmax), P(out), LL(blocksize), LL(q.size))
    return out


def bnb_dequantize_nf4(lib, codes, absmax, n, bf16=False):
    codes = np.ascontiguousarray(codes, np.uint8)
    absmax = np.ascontiguousarray(absmax, np.float32)
    out = np.zeros(n, np.uint16 if bf16 else np.float32)
    fn = lib.cdequantize_blockwise_cpu_nf4_bf16 if bf16 else lib.cdequantize_blockwise_cpu_nf4_fp32
    fn(P(codes), P(absmax), P(out), LL(64), LL(1), LL(n))
    return out


def make_sweep(d):
    """Blocks of 256 led by 1.0 (so A = 1, v = x): the floats around every code change of the table,
    then random values in blocks of random absmax."""
    lut = ref._LUT
    vals = []
    for k in np.nonzero(lut[1:] != lut[:-1])[0] + 1:
        v = f32(2 * (k - 0.5) / 65535 - 1)
        for _ in range(64):
            v = np.nextafter(v, f32(-2))
        for _ in range(128):
            vals.append(v)
            v = np.nextafter(v, f32(2))
    # bnb's code-book midpoints themselves (its LUT grid compares against them)
    vals += (f32(0.5) * (ref.DYN[:-1] + ref.DYN[1:])).tolist()
    vals = np.array(vals, np.float32)
    blocks = -(-vals.size // 255)
    body = np.zeros(blocks * 255, np.float32)
    body[:vals.size] = vals
    x = np.concatenate([np.ones((blocks, 1), np.float32), body.reshape(blocks, 255)], axis=1)
    rng = np.random.default_rng(38)
    y = (rng.standard_normal((64, 256)) * rng.uniform(1e-6, 10, (64, 1))).astype(np.float32)
    y[3] = 0  # a block of zeros
    np.concatenate([x.reshape(-1), y.reshape(-1)]).tofile(os.path.join(d, "sweep8.f32"))


def check(lib, d):
    bad = 0
    files = sorted(glob.glob(os.path.join(d, "case_*.f32")))
    for f in files:
        w = np.fromfile(f, np.float32)
        n = w.size
        base = f[:-4]
        ours, L = ref.read_part(open(base + ".nf4", "rb").read(), n)
        diffs = []
        # 1. the absmax through their 8-bit dequant + offset
        am = bnb_dequantize_blockwise(lib, ours["qabs"], ours["nested"], 256)
        am = (am + ours["offset"]).astype(np.float32)
        our_am = np.fromfile(base + ".abs", np.float32)
        if am.tobytes() != our_am.tobytes():
            diffs.append("block absmax: %d differ" % int(np.sum(am.view(np.uint32) != our_am.view(np.uint32))))
        # 2. the NF4 dequant, FP32 and BF16
        deq = bnb_dequantize_nf4(lib, ours["codes"], am, n)
        our = np.fromfile(base + ".deq", np.float32)
        if deq.tobytes() != our.tobytes():
            diffs.append("FP32 values: %d differ" % int(np.sum(deq.view(np.uint32) != our.view(np.uint32))))
        checked = "absmax, FP32"
        if os.path.exists(base + ".bf16"):
            deq16 = bnb_dequantize_nf4(lib, ours["codes"], am, n, bf16=True)
            our16 = np.fromfile(base + ".bf16", np.uint16)
            if deq16.tobytes() != our16.tobytes():
                diffs.append("BF16 values: %d differ" % int(np.sum(deq16 != our16)))
            checked += ", BF16"
        # 3. their quantization of (absmax - offset)
        _, raw = ref.quantize_4bit(w)
        q, nested = bnb_quantize_blockwise(lib, (raw - ours["offset"]).astype(np.float32), 256)
        if q.tobytes() != ours["qabs"].tobytes():
            diffs.append("absmax codes: %d differ" % int(np.sum(q != ours["qabs"])))
        if nested.tobytes() != ours["nested"].tobytes():
            diffs.append("nested absmax differ")
        print("%-34s n=%-7d %s" % (os.path.basename(f), n, ("bitwise equal (%s, nested codes)" % checked) if not diffs
                                   else "; ".join(diffs)))
        bad += bool(diffs)
    sw = os.path.join(d, "sweep8.f32")
    if os.path.exists(sw):
        x = np.fromfile(sw, np.float32)
        q, nested = bnb_quantize_blockwise(lib, x, 256)
        oq = np.fromfile(sw[:-4] + ".q8", np.uint8)
        oa = np.fromfile(sw[:-4] + ".a8", np.float32)
        nq = int(np.sum(q != oq)) if q.size == oq.size else -1
        ok = nq == 0 and nested.tobytes() == oa.tobytes()
        print("sweep8: %d values, %d blocks: %s" % (x.size, nested.size, "bitwise equal" if ok else "%d codes differ" % nq))
        bad += not ok
    print("%d case(s) + sweep, %d differ" % (len(files), bad))
    return 1 if bad or not files else 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[2] not in ("--make-sweep", "--check"):
        print(__doc__)
        sys.exit(2)
    if sys.argv[2] == "--make-sweep":
        make_sweep(sys.argv[3])
        sys.exit(0)
    sys.exit(check(load(sys.argv[1]), sys.argv[3]))
