#!/usr/bin/env python3
"""dev/nf4_reference.py — bitsandbytes' NF4 with double quantization in numpy, independent of ops/nf4.cuh.

A faithful port of what bitsandbytes 0.50.2 runs for a CPU tensor (QLoRA's defaults: quant_type nf4,
blocksize 64, compress_statistics=True):
  functional.quantize_4bit  -> backends/default/ops.py quantize_4bit (torch code; no CPU kernel is
                               registered for it), then offset = absmax.mean(),
                               quantize_blockwise(absmax - offset, blocksize=256)
  quantize_blockwise (FP32)  -> libbitsandbytes_cpu.so cquantize_blockwise_cpu_fp32 (csrc/cpu_ops.cpp
                               quantize_cpu_impl: a 65536-point grid and a LUT, one FMA)
  dequantize_4bit            -> dequantize_blockwise(absmax codes) + offset, then code[c] * absmax
Every FP32 operation is done in numpy float32 (IEEE, correctly rounded, as torch's CPU kernels); the one
FMA of the 8-bit rule is computed exactly (fractions) and rounded once to float32.

The rules (ops/nf4.cuh states them too):
  4-bit: a = max|w| over the block of 64. Full blocks: v = w * (1.0f / max(a, 1e-38f)), absmax a.
         The partial last block: v = w / a', absmax a' = max(a, 1e-38f). v clamped to [-1, 1].
         c = torch.bucketize(v, mid, right=False), mid = (NF4[:-1] + NF4[1:]) / 2 in float32:
         the number of midpoints strictly below v, so a tie (v == mid[k]) takes the lower code k.
         Odd n: one 0.0 appended (code 7) before packing; byte i = c[2i] << 4 | c[2i+1].
  offset: torch's absmax.mean() in bitsandbytes; here (and in ops/nf4.cuh) the double sum in index
         order / nb, rounded to float32 (the nested codes are bitsandbytes' for that offset).
  8-bit: per 256: A = max(0, max|d|); A == 0 -> codes 0; else v = clamp(d * (1.0f / A), -1, 1),
         k = int(fmaf((v + 1.0f) * 0.5f, 65535.0f, 0.5f)), code = LUT[k], LUT[k] = the number of
         midpoints 0.5f * (dyn[j] + dyn[j+1]) strictly below -1.0f + (2.0f * k) / 65535.0f.

Usage:
  nf4_reference.py --tables ops/nf4.cuh      the header's NF4 and dynamic-map literals = bnb's (exit 1 if not)
  nf4_reference.py --make-cases DIR          writes DIR/case_*.f32 (float32 weights; the name holds n):
                                             random tensors, partial blocks and nested blocks, zeros, ties,
                                             and cases that tell the real rules from their alternatives
  nf4_reference.py --check DIR               compares each DIR/case_*.nf4 (ops/nf4.cuh's storage, written
                                             by test nf4_vs_reference) with this port, bit for bit
  nf4_reference.py --self-test               the discriminating cases do discriminate
"""
import glob
import os
import re
import sys
from fractions import Fraction

import numpy as np

f32 = np.float32

# bitsandbytes 0.50.2 functional.get_4bit_type("nf4"): these decimals, torch.tensor(...) (float32), / max.
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)
NF4 = NF4 / np.abs(NF4).max()


def torch_linspace_f32(start, end, steps, vec=8):
    """torch.linspace(start, end, steps, dtype=float32) on the CPU (aten RangeFactoriesKernel.cpp,
    linspace_kernel, as built for a CPU capability: GCC contracts its `start + step * idx` into an FMA):
    step = (end - start) / (steps - 1) in float; cpu_serial_kernel_vec runs the vectorised lambda on
    chunks of 2 * vec elements (vec = 8 floats with AVX2, 16 with AVX-512) and the scalar one on the
    rest. Scalar: i < steps / 2 ? fma(step, i, start) : fma(-step, steps - i - 1, end). Vectorised (vec
    lanes at idx): base = the scalar formula at idx, lane j = base + j * step (not fused). So the values
    depend on the SIMD width torch dispatches to. Checked: equal to Debian's torch 1.13 (AVX2) for
    every linspace create_dynamic_map calls."""
    s, e = f32(start), f32(end)
    step = (e - s) / f32(steps - 1)
    half = steps // 2

    def scalar(i):
        return fma_f32(step, f32(i), s) if i < half else fma_f32(-step, f32(steps - i - 1), e)
    out = np.empty(steps, dtype=np.float32)
    nvec = (steps // (2 * vec)) * (2 * vec) if vec else 0
    for idx in range(0, nvec, vec or 1):
        base = scalar(idx)
        for j in range(vec):
            out[idx + j] = base + f32(j) * step
    for i in range(nvec, steps):
        out[i] = scalar(i)
    return out


def create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8, vec=8):
    """bitsandbytes functional.create_dynamic_map, with torch's float32 arithmetic in numpy (torch's
    CPU SIMD width vec: 8 with AVX2, 16 with AVX-512, 0 for the scalar kernel)."""
    data = []
    non_sign_bits = total_bits - 1
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    for i in range(max_exponent_bits):
        fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                             else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        boundaries = torch_linspace_f32(0.1, 1, fraction_items, vec)
        means = (boundaries[:-1] + boundaries[1:]) / f32(2.0)
        scale = f32(10 ** (-(max_exponent_bits - 1) + i))  # a Python scalar times a float32 tensor: float32
        data += (scale * means).astype(np.float32).tolist()
        if signed:
            data += (-scale * means).astype(np.float32).tolist()
    assert additional_items == 0
    data.append(0)
    data.append(1.0)
    assert len(data) == 2 ** total_bits
    data.sort()
    return np.array(data, dtype=np.float32)



# ---------------------------------------------------------------------------------------------------
# 4-bit: backends/default/ops.py quantize_4bit

def quantize_4bit(A, blocksize=64):
    """-> (packed uint8 (ceil(n/2),), absmax float32 (nb,)), as bitsandbytes' torch code computes them."""
    A = np.asarray(A, dtype=np.float32).reshape(-1)
    n = A.size
    rem = n % blocksize
    full = n - rem
    blocks = full // blocksize
    bounds = (NF4[:-1] + NF4[1:]) / f32(2)
    A_com = A[:full].reshape(blocks, blocksize)
    absmax = np.abs(A_com).max(axis=-1) if blocks else np.zeros(0, np.float32)
    recip = f32(1.0) / np.maximum(absmax, f32(1e-38))           # 1.0 / t is t.reciprocal() * 1.0
    scaled = np.clip(A_com * recip[:, None], f32(-1), f32(1)).reshape(-1)
    if rem:
        am = np.maximum(np.abs(A[full:]).max(), f32(1e-38))     # clamped, and stored clamped
        absmax = np.concatenate([absmax, np.array([am], np.float32)])
        scaled = np.concatenate([scaled, np.clip(A[full:] / am, f32(-1), f32(1))])
    if scaled.size % 2:
        scaled = np.concatenate([scaled, np.zeros(1, np.float32)])
    q = np.searchsorted(bounds, scaled.astype(np.float32), side="left").astype(np.uint8)  # bucketize, right=False
    packed = (q[0::2] << 4) | q[1::2]
    return packed.astype(np.uint8), absmax.astype(np.float32)


# ---------------------------------------------------------------------------------------------------
# 8-bit: csrc/cpu_ops.cpp quantize_cpu_impl (FP32 input)

def _round_f32(x):
    """A Fraction rounded to the nearest float32 (ties to even), exactly."""
    c = f32(float(x))
    best = None
    for cand in (np.nextafter(c, f32(-np.inf)), c, np.nextafter(c, f32(np.inf))):
        d = abs(Fraction(float(cand)) - x)
        key = (d, int(np.frombuffer(cand.tobytes(), np.uint32)[0]) & 1)
        if best is None or key < best[0]:
            best = (key, cand)
    return best[1]


def fma_f32(a, b, c):
    return _round_f32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


DYN = create_dynamic_map(signed=True)   # torch on AVX2: what the table in ops/nf4.cuh holds


def build_quantize_lut(code):
    mid = (f32(0.5) * (code[:-1] + code[1:])).astype(np.float32)
    k = np.arange(65536)
    val = (f32(-1.0) + (f32(2.0) * k.astype(np.float32)) / f32(65535)).astype(np.float32)
    return np.searchsorted(mid, val, side="left").astype(np.uint8)   # the number of midpoints < val


_LUT = build_quantize_lut(DYN)


def quantize_blockwise_cpu(A, code=DYN, blocksize=256, lut=None):
    """-> (codes uint8 (n,), absmax float32 (nblocks,)) as cquantize_blockwise_cpu_fp32 computes them."""
    lut = _LUT if lut is None else lut
    A = np.asarray(A, dtype=np.float32).reshape(-1)
    n = A.size
    nblocks = -(-n // blocksize)
    out = np.zeros(n, np.uint8)
    absmax = np.zeros(nblocks, np.float32)
    for b in range(nblocks):
        x = A[b * blocksize:(b + 1) * blocksize]
        a = max(f32(0), np.abs(x).max())
        absmax[b] = a
        if a == 0:
            continue
        inv = f32(1.0) / f32(a)
        for i, xi in enumerate(x):
            v = np.clip(f32(xi) * inv, f32(-1), f32(1))
            t = (v + f32(1)) * f32(0.5)
            k = int(fma_f32(t, f32(65535), f32(0.5)))   # cvttss2si, then the low 16 bits
            out[b * blocksize + i] = lut[k & 0xFFFF]
    return out, absmax


def our_offset(absmax):
    s = 0.0
    for a in absmax:
        s += float(a)
    return f32(s / len(absmax)) if len(absmax) else f32(0)


def quantize_nf4_dq(w, dyn=None, lut=None):
    """-> dict(codes, absmax (raw), offset, qabs, nested): the part as bitsandbytes makes it (our offset);
    dyn, lut: another nested map and its quantizer's table (build_quantize_lut), None: DYN's."""
    codes, absmax = quantize_4bit(w)
    offset = our_offset(absmax)
    qabs, nested = quantize_blockwise_cpu((absmax - offset).astype(np.float32), DYN if dyn is None else dyn, 256, lut)
    return dict(codes=codes, absmax=absmax, offset=offset, qabs=qabs, nested=nested)


def dequantize_nf4_dq(q, n, blocksize=64, dyn=None):
    """dequantize_blockwise (code[q] * absmax), += offset, then code[c] * absmax: FP32 (n,); dyn: the
    nested map (None: DYN)."""
    nb = q["qabs"].size
    am = ((DYN if dyn is None else dyn)[q["qabs"]] * np.repeat(q["nested"], 256)[:nb]).astype(np.float32)
    am = (am + q["offset"]).astype(np.float32)
    c = np.empty(2 * q["codes"].size, np.uint8)
    c[0::2] = q["codes"] >> 4
    c[1::2] = q["codes"] & 15
    return (NF4[c[:n]] * np.repeat(am, blocksize)[:n]).astype(np.float32), am


# ---------------------------------------------------------------------------------------------------
# Our storage (ops/nf4.cuh)

def part_layout(n):
    a16 = lambda x: (x + 15) // 16 * 16
    nb = -(-n // 64)
    nn = -(-nb // 256)
    o_qabs = a16(16 + 4 * nn)
    o_codes = a16(o_qabs + nb)
    return dict(n=n, nb=nb, nn=nn, o_nested=16, o_qabs=o_qabs, o_codes=o_codes, bytes=a16(o_codes + (n + 1) // 2))


def read_part(buf, n):
    P = part_layout(n)
    assert len(buf) == P["bytes"], (len(buf), P)
    return dict(offset=np.frombuffer(buf[0:4], np.float32)[0],
                nested=np.frombuffer(buf[16:16 + 4 * P["nn"]], np.float32),
                qabs=np.frombuffer(buf[P["o_qabs"]:P["o_qabs"] + P["nb"]], np.uint8),
                codes=np.frombuffer(buf[P["o_codes"]:P["o_codes"] + (n + 1) // 2], np.uint8)), P


# ---------------------------------------------------------------------------------------------------
# Cases

def argmin_rule(v):
    """The alternative 4-bit rule: argmin |v - NF4[k]| in float32, first index on ties."""
    return int(np.argmin(np.abs(f32(v) - NF4)))


def bucketize(v, right=False):
    bounds = (NF4[:-1] + NF4[1:]) / f32(2)
    return int(np.searchsorted(bounds, f32(v), side="right" if right else "left"))


def discriminating_values():
    """Scaled values (absmax 1) on which the real 4-bit rule and an alternative disagree:
    (v, real code, argmin's, bucketize(right=True)'s)."""
    bounds = (NF4[:-1] + NF4[1:]) / f32(2)
    out = []
    for k in range(15):
        v = bounds[k]
        out.append((v, bucketize(v), argmin_rule(v), bucketize(v, right=True)))
    return out


def recip_vs_div_case(rng):
    """A block absmax a and weight w where w * (1/a) and w / a fall in different NF4 buckets: the full
    block (reciprocal) and the partial block (division) code it differently."""
    bounds = (NF4[:-1] + NF4[1:]) / f32(2)
    for _ in range(100000):
        a = f32(rng.uniform(0.01, 1.0))
        k = int(rng.integers(0, 15))
        w0 = f32(bounds[k] * a)
        for s in range(-4, 5):
            w = w0
            for _ in range(abs(s)):
                w = np.nextafter(w, f32(np.sign(s) * np.inf))
            if abs(w) < a and bucketize(w * (f32(1) / a)) != bucketize(w / a):
                return a, w
    raise RuntimeError("no reciprocal/division case found")


def write_case(d, name, w):
    w = np.asarray(w, np.float32)
    w.tofile(os.path.join(d, "case_%s_n%d.f32" % (name, w.size)))


def make_cases(d):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(37)
    # random normal tensors: partial blocks, a partial nested block, odd n
    for n in (100, 64 * 256 + 64, 64 * 300 + 7, 1, 63, 65, 64 * 512):
        write_case(d, "normal", (rng.standard_normal(n) * 0.02).astype(np.float32))
    # heavy tails and zeros: blocks of zeros (full and partial), outliers
    w = (rng.standard_t(3, 64 * 20 + 33) * 0.01).astype(np.float32)
    w[64:128] = 0
    w[-33:] = 0
    write_case(d, "zeros_tail", w)
    write_case(d, "allzero", np.zeros(64 * 3 + 5, np.float32))
    # ties and the 4-bit alternatives: each block has absmax 1 (v = w) and holds the FP32 midpoints
    # and their neighbours; the last block is partial (v = w / 1)
    vals = []
    for v, _, _, _ in discriminating_values():
        vals += [v, np.nextafter(v, f32(2)), np.nextafter(v, f32(-2))]
    blk = np.zeros((2, 64), np.float32)
    blk[:, 0] = 1.0
    blk[0, 1:1 + len(vals)] = vals
    blk[1, 1:1 + len(vals)] = -np.array(vals, np.float32)
    tail = np.array([1.0] + vals[:20], np.float32)
    write_case(d, "ties", np.concatenate([blk.reshape(-1), tail]))
    # reciprocal (full block) against division (partial block): the same (a, w) in both
    a, wv = recip_vs_div_case(rng)
    full = np.zeros(64, np.float32)
    full[0], full[1] = a, wv
    write_case(d, "recip_div", np.concatenate([full, np.array([a, wv], np.float32)]))
    # the 8-bit grid: absmax {1, 3, 2 + e, 2 - e} (offset 2, d = +-e tiny against A = 1): the grid point,
    # not the nearest dynamic code, decides; and a nested block whose absmax all equal the offset (A = 0)
    blocks = []
    for am in (1.0, 3.0, 2.0 + 2.0 ** -17, 2.0 - 2.0 ** -17, 2.0 + 2.0 ** -10, 2.0 - 2.0 ** -10):
        b = (rng.standard_normal(64) * 0.1).astype(np.float32)
        b = np.clip(b, -0.5, 0.5)
        b[int(rng.integers(0, 64))] = am
        blocks.append(b)
    write_case(d, "grid8", np.concatenate(blocks))
    same = (rng.standard_normal((300, 64)) * 0.1).astype(np.float32).clip(-0.5, 0.5)
    same[:, 5] = 0.75
    write_case(d, "equal_absmax", same.reshape(-1))


def check(d):
    files = sorted(glob.glob(os.path.join(d, "case_*.f32")))
    if not files:
        print("no cases in", d)
        return 1
    bad = 0
    for f in files:
        w = np.fromfile(f, np.float32)
        n = w.size
        nf = f[:-4] + ".nf4"
        if not os.path.exists(nf):
            print("missing", nf)
            bad += 1
            continue
        buf = open(nf, "rb").read()
        ours, P = read_part(buf, n)
        ref = quantize_nf4_dq(w)
        diffs = []
        if ours["offset"].tobytes() != ref["offset"].tobytes():
            diffs.append("offset %r != %r" % (float(ours["offset"]), float(ref["offset"])))
        for key in ("nested", "qabs", "codes"):
            if ours[key].tobytes() != ref[key].tobytes():
                ne = int(np.sum(ours[key].view(np.uint8) != ref[key].view(np.uint8)))
                diffs.append("%s: %d bytes differ" % (key, ne))
        # our padding is zero (bnb has none; ours must be deterministic)
        mask = np.ones(P["bytes"], bool)
        mask[0:4] = False
        mask[16:16 + 4 * P["nn"]] = False
        mask[P["o_qabs"]:P["o_qabs"] + P["nb"]] = False
        mask[P["o_codes"]:P["o_codes"] + (n + 1) // 2] = False
        if np.any(np.frombuffer(buf, np.uint8)[mask] != 0):
            diffs.append("padding not zero")
        # our FP32 dequantization (test writes it as .deq) = this port's
        dq = f[:-4] + ".deq"
        if os.path.exists(dq):
            theirs, _ = dequantize_nf4_dq(ref, n)
            if np.fromfile(dq, np.float32).tobytes() != theirs.tobytes():
                diffs.append("FP32 dequantization differs")
        name = os.path.basename(f)
        print("%-34s n=%-7d nb=%-4d %s" % (name, n, P["nb"], "bitwise equal" if not diffs else "; ".join(diffs)))
        bad += bool(diffs)
    print("%d case(s), %d differ" % (len(files), bad))
    return 1 if bad else 0


def tables(header):
    src = open(header).read()
    def table(name, count):
        m = re.search(r"static const float %s\[%d\] = \{(.*?)\};" % (name, count), src, re.S)
        body = re.sub(r"//[^\n]*", "", m.group(1))
        vals = [float.fromhex(t.strip().rstrip("f")) for t in body.split(",") if t.strip()]
        return np.array(vals, np.float32)
    ok = True
    for name, ours, ref in (("NF4_CODE", table("NF4_CODE", 16), NF4), ("NF4_DYN", table("NF4_DYN", 256), DYN)):
        eq = ours.size == ref.size and ours.tobytes() == ref.tobytes()
        print("%s: %d values, %s" % (name, ours.size, "= bitsandbytes'" if eq else "DIFFERS from bitsandbytes'"))
        ok &= eq
    return 0 if ok else 1


def self_test():
    ok = True
    dv = discriminating_values()
    tie_right = [k for k, (v, real, am, right) in enumerate(dv) if real != right]
    tie_argmin = [k for k, (v, real, am, right) in enumerate(dv) if real != am]
    print("midpoints where bucketize(right=True) differs: %s; where argmin (first index) differs: %s" % (tie_right, tie_argmin))
    ok &= len(tie_right) > 0 and len(tie_argmin) > 0
    rng = np.random.default_rng(37)
    a, w = recip_vs_div_case(rng)
    print("w * (1/a) vs w / a: a=%s w=%s -> codes %d vs %d" % (float(a).hex(), float(w).hex(),
          bucketize(w * (f32(1) / a)), bucketize(w / a)))
    # the 8-bit grid against the nearest code
    e = f32(2.0 ** -17)
    v = e * (f32(1) / f32(1))
    q, _ = quantize_blockwise_cpu(np.array([1.0, e], np.float32), DYN, 256)
    nearest = int(np.argmin(np.abs(DYN - v)))
    print("8-bit: v=%s -> grid code %d (dyn %s), nearest code %d (dyn %s)" % (float(v).hex(), q[1], float(DYN[q[1]]),
          nearest, float(DYN[nearest])))
    ok &= int(q[1]) != nearest
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--make-cases":
        make_cases(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "--tables":
        sys.exit(tables(sys.argv[2]))
    elif len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        sys.exit(self_test())
    else:
        print(__doc__)
        sys.exit(2)
