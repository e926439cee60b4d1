#!/usr/bin/env bash
# dev/cublas_link_dir.sh DIR — for a build on a GPU box (dev/gpu_check.sh's and dev/attn_bench.sh's
# fallback): where the linker would find no unversioned libcublasLt.so / libcublas.so (Python's
# nvidia-cublas wheel ships only libcublasLt.so.13 and libcublas.so.13), makes DIR/libcublasLt.so and
# DIR/libcublas.so links to the newest versioned file found, and prints DIR: put it on LIBRARY_PATH
# (gcc, which nvcc links with, searches it for -l). Searched: LD_LIBRARY_PATH, the toolkit's lib64,
# ldconfig's cache. Prints DIR (maybe holding nothing: the unversioned names were found, or no
# cuBLAS at all, which the link then reports); the links it made go to stderr.
set -u
dir=${1:?usage: bash dev/cublas_link_dir.sh DIR}
mkdir -p "$dir" || exit 1
for lib in libcublasLt libcublas; do
    for d in ${LD_LIBRARY_PATH//:/ } /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
             $(ldconfig -p 2>/dev/null | grep -oE "/[^ ]*/$lib\.so[.0-9]*" | xargs -r -n 1 dirname | sort -u); do
        [ -e "$d/$lib.so" ] && break # the linker finds it there (when the folder is searched: -L or LIBRARY_PATH)
        f=$(ls "$d/$lib".so.[0-9]* 2>/dev/null | sort -V | tail -n 1)
        if [ -n "$f" ]; then ln -sf "$f" "$dir/$lib.so"; echo "cublas_link_dir: $dir/$lib.so -> $f" >&2; break; fi
    done
done
echo "$dir"
