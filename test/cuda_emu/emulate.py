#!/usr/bin/env python3
"""test/cuda_emu/emulate.py — copy the CUDA sources where g++ can compile them against the emulator.

    python3 test/cuda_emu/emulate.py OUTDIR FILE...      (make test/test_emu runs it)

Each FILE (a path relative to the repository root) is copied to OUTDIR/FILE, so the copies include
each other exactly as the originals do, with these mechanical rewrites and nothing else; every line
stays where it was and a `#line` directive names the original, so compiler messages and __FILE__ /
__LINE__ (die(), the emulator's reports) point into the real sources:

  kernel<<<grid, block, smem, stream>>>(args);
      -> emu::launch("kernel", kernel, BOUND, dim3(grid), dim3(block), smem, stream, args);
         BOUND is the kernel's __launch_bounds__ expression (found in any FILE), or 0
  extern __shared__ T name[];       -> T* name = (T*)emu_dynamic_shared(alignof(T));
  __shared__ T name[A][B];          -> EMU_SHARED(T, name, [A][B], alignof(T));   (one copy per block)
      (with __align__(N) after __shared__: N instead of alignof(T); the emulator places each array
      at exactly its declared alignment, never more, so a 16-byte access to an array declared
      with less fails as it may on a GPU)
  __CUDACC__                        -> ZT_CUDA_EMU   (so g++'s own headers do not take us for nvcc)
  __host__ __device__               -> EMU_HOST_DEVICE
  #pragma nv_diag_suppress, unroll  -> a comment

Launches and __shared__ inside comments and strings are left alone. A CUDA construct the emulator
does not implement stops the script with the file and line, rather than surfacing later as a
puzzling compiler error.
"""
import os
import re
import sys

UNSUPPORTED = [  # (pattern, what to say)
    (r'\b__constant__\b', '__constant__ memory'),
    (r'\b__managed__\b|\bcudaMallocManaged\b', 'managed memory'),
    (r'\batomic(?!Max\b)[A-Z]\w*\s*\(', 'atomics (atomicMax on unsigned is emulated)'),
    (r'\b__ldg\s*\(', '__ldg'),
    (r'\bcooperative_groups\b', 'cooperative groups'),
    (r'\btexture\s*<', 'textures'),
]


def code_mask(s):
    """For each character of s: True when it is code, False inside a comment, string or char literal."""
    mask = [True] * len(s)
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if s.startswith('//', i):
            j = s.find('\n', i)
            j = n if j < 0 else j
        elif s.startswith('/*', i):
            j = s.find('*/', i + 2)
            j = n if j < 0 else j + 2
        elif c in '"\'':
            j = i + 1
            while j < n and s[j] != c:
                j += 2 if s[j] == '\\' else 1
            j += 1
        else:
            i += 1
            continue
        for k in range(i, min(j, n)):
            mask[k] = False
        i = j
    return mask


def line_of(s, pos):
    return s.count('\n', 0, pos) + 1


def matching(s, mask, i, open_ch, close_ch):
    """Index just past the bracket that closes s[i] (== open_ch), counting only code."""
    depth = 0
    for j in range(i, len(s)):
        if not mask[j]:
            continue
        if s[j] == open_ch:
            depth += 1
        elif s[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    raise ValueError('unbalanced %s' % open_ch)


def split_top(text):
    """Split a launch configuration on the commas outside parentheses."""
    parts, depth, cur = [], 0, ''
    for ch in text:
        if ch in '([{':
            depth += 1
        elif ch in ')]}':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def launch_bounds(sources):
    """kernel name -> its __launch_bounds__ expression, over all files."""
    bounds = {}
    for s in sources.values():
        mask = code_mask(s)
        for m in re.finditer(r'__launch_bounds__\s*\(', s):
            if not mask[m.start()]:
                continue
            close = matching(s, mask, m.end() - 1, '(', ')')
            name = re.match(r'\s*(\w+)\s*\(', s[close:])
            if not name:
                raise ValueError('__launch_bounds__ at line %d: no kernel name after it' % line_of(s, m.start()))
            bounds[name.group(1)] = split_top(s[m.end():close - 1])[0]  # max threads (not min blocks)
    return bounds


def rewrite_launches(s, bounds, path):
    out, pos, count = [], 0, 0
    mask = code_mask(s)
    while True:
        i = s.find('<<<', pos)
        while i >= 0 and not mask[i]:
            i = s.find('<<<', i + 3)
        if i < 0:
            break
        name = re.search(r'(\w+)\s*$', s[pos:i])
        if not name:
            raise ValueError('%s:%d: a launch without a kernel name before <<<' % (path, line_of(s, i)))
        start = pos + name.start()
        j = s.find('>>>', i)
        cfg = split_top(s[i + 3:j])
        if len(cfg) < 2 or len(cfg) > 4:
            raise ValueError('%s:%d: launch configuration <<<%s>>>' % (path, line_of(s, i), s[i + 3:j]))
        cfg += ['0', '0'][:4 - len(cfg)]  # smem, stream defaults
        k = j + 3
        while s[k].isspace():
            k += 1
        if s[k] != '(':
            raise ValueError('%s:%d: no argument list after >>>' % (path, line_of(s, i)))
        end = matching(s, mask, k, '(', ')')
        args = s[k + 1:end - 1]
        kernel = name.group(1)
        head = 'emu::launch("%s", %s, %s, dim3(%s), dim3(%s), %s, %s' % (
            kernel, kernel, bounds.get(kernel, '0'), cfg[0], cfg[1], cfg[2], cfg[3])
        # keep every line where it was: the configuration's newlines go before the arguments
        pad = '\n' * max(0, s[start:k + 1].count('\n') - head.count('\n'))
        call = head + (', ' if args.strip() else '') + pad + args + ')'
        out.append(s[pos:start])
        out.append(call)
        pos = end
        count += 1
    out.append(s[pos:])
    return ''.join(out), count


def rewrite_shared(s, path):
    mask = code_mask(s)
    count = [0]

    # the declared alignment (__align__(N), else the type's) goes to the emulator, which honours no more
    def align(m, t):
        return m.group(1) if m.group(1) else 'alignof(%s)' % t

    def dynamic(m):
        if not mask[m.start()]:
            return m.group(0)
        count[0] += 1
        t = m.group(2)
        return '%s* %s = (%s*)emu_dynamic_shared(%s);' % (t, m.group(3), t, align(m, t))

    def static(m):
        if not mask[m.start()]:
            return m.group(0)
        count[0] += 1
        t = m.group(2)
        return 'EMU_SHARED(%s, %s, %s, %s);' % (t, m.group(3), re.sub(r'\s+', '', m.group(4)), align(m, t))

    # both patterns are matched on the original text (same length up to the match), so mask applies
    s2 = re.sub(r'extern\s+__shared__\s+(?:__align__\s*\(\s*(\d+)\s*\)\s+)?([\w:]+)\s+(\w+)\s*\[\s*\]\s*;', dynamic, s)
    mask = code_mask(s2)
    s3 = re.sub(r'(?<!extern )__shared__\s+(?:__align__\s*\(\s*(\d+)\s*\)\s+)?([\w:]+)\s+(\w+)\s*((?:\[[^\]]+\]\s*)*);', static, s2)
    left = [m.start() for m in re.finditer(r'\b__shared__\b', s3) if code_mask(s3)[m.start()]]
    if left:
        raise ValueError('%s:%d: a __shared__ declaration emulate.py does not understand' % (path, line_of(s3, left[0])))
    return s3, count[0]


def check_supported(s, path):
    mask = code_mask(s)
    for pat, what in UNSUPPORTED:
        for m in re.finditer(pat, s):
            if mask[m.start()]:
                raise ValueError('%s:%d: %s: not emulated (add it to test/cuda_emu/cuda_emu.h first)' %
                                 (path, line_of(s, m.start()), what))


def transform(s, path, bounds):
    check_supported(s, path)
    s, launches = rewrite_launches(s, bounds, path)
    s, shared = rewrite_shared(s, path)
    s = re.sub(r'\b__CUDACC__\b', 'ZT_CUDA_EMU', s)
    s = re.sub(r'__host__\s+__device__', 'EMU_HOST_DEVICE', s)
    s = re.sub(r'^([ \t]*)#pragma (nv_diag_suppress|unroll)', r'\1// (nvcc only) #pragma \2', s, flags=re.M)
    return '#line 1 "%s"\n' % path + s, launches, shared


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    outdir, files = sys.argv[1], sys.argv[2:]
    sources = {f: open(f, encoding='utf-8').read() for f in files}
    try:
        bounds = launch_bounds(sources)
        total_l = total_s = 0
        for f, s in sources.items():
            new, launches, shared = transform(s, f, bounds)
            total_l += launches
            total_s += shared
            dst = os.path.join(outdir, f)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            old = open(dst, encoding='utf-8').read() if os.path.exists(dst) else None
            if old != new:
                with open(dst, 'w', encoding='utf-8') as out:
                    out.write(new)
    except ValueError as e:
        sys.exit('emulate.py: %s' % e)
    print('emulate.py: %d files into %s: %d kernel launches, %d __shared__ declarations rewritten' %
          (len(files), outdir, total_l, total_s))


if __name__ == '__main__':
    main()
