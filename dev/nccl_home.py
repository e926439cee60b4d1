#!/usr/bin/env python3
"""dev/nccl_home.py — print the folder of the NCCL Python wheel (nvidia-nccl-cu12/cu13), or exit 1.

The wheel installs the namespace package `nvidia.nccl` (no __init__.py, so its __file__ is None: use
__path__) holding include/nccl.h and lib/libnccl.so.2 (no unversioned libnccl.so: link it by full
name, -l:libnccl.so.2). Used by the Makefile (NCCL_HOME) and dev/gpu_check.sh (LD_LIBRARY_PATH).
"""
import os
import sys

try:
    import nvidia.nccl as nccl
except ImportError:
    sys.exit(1)
for d in list(getattr(nccl, "__path__", [])):
    if os.path.isfile(os.path.join(d, "lib", "libnccl.so.2")):
        print(d)
        sys.exit(0)
sys.exit(1)
