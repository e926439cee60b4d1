#!/usr/bin/env python3
"""dev/cudnn_frontend_include.py — print the include folder of the PyPI package nvidia-cudnn-frontend
(cudnn-frontend's header-only C++ API: include/cudnn_frontend.h), or exit 1.

The wheel puts its headers at site-packages/include/ (not inside the `cudnn` Python package, which
is not imported here: it needs a GPU stack). Found through the installed distribution's file list,
so any Python that has the package installed answers. Used by the Makefile (CUDNN_FRONTEND_INCLUDE,
make USE_CUDNN=1); .ci/run installs the pinned version (--no-deps: only the headers are needed).
"""
import os
import sys
from importlib import metadata

try:
    dist = metadata.distribution("nvidia-cudnn-frontend")
except metadata.PackageNotFoundError:
    sys.exit(1)
for f in dist.files or []:
    if str(f).replace("\\", "/") == "include/cudnn_frontend.h":
        print(os.path.dirname(os.path.abspath(str(dist.locate_file(f)))))
        sys.exit(0)
sys.exit(1)
