"""cffi API-mode build of xinfer_async._native (the cpu backend's C kernels).

Used two ways:
  * setuptools: setup.py has ``cffi_modules=["native/build_native.py:ffibuilder"]``;
    ``pip install -e .`` (or ``pip install .``) builds ``xinfer_async/_native*.so``.
  * developer shortcut: ``python native/build_native.py`` builds the extension in
    place into ``xinfer_async/`` from any current directory.

The cdef is native/xinfer_native.h with its ``#include "xi_kernels.h"`` replaced by that file (the
structs and prototypes generated from xinfer_async/ops/_kernels.py) and every comment and
preprocessor line removed.
"""
import os
import re

import cffi

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)

# ffibuilder.compile() (the developer shortcut) chdirs into its tmpdir: absolute paths there
_ABSOLUTE = __name__ == "__main__"


def _rel(path):
    """Source paths relative to the repo root when we run from there (what
    setuptools wants: it refuses absolute paths for in-tree builds), else absolute."""
    absolute = os.path.join(_HERE, path)
    if _ABSOLUTE:
        return absolute
    try:
        if os.path.samefile(os.getcwd(), _ROOT):
            return os.path.relpath(absolute, _ROOT)
    except OSError:
        pass
    return absolute


def _cdef_text():
    with open(os.path.join(_HERE, "xinfer_native.h")) as f:
        text = f.read()
    with open(os.path.join(_HERE, "xi_kernels.h")) as f:
        text = text.replace('#include "xi_kernels.h"', f.read())
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


SOURCES = ["fence.c"] + sorted(
    os.path.join("kernels", name)
    for name in os.listdir(os.path.join(_HERE, "kernels"))
    if name.endswith(".c")
)

ffibuilder = cffi.FFI()
ffibuilder.cdef(_cdef_text())
ffibuilder.set_source(
    "xinfer_async._native",
    '#include "xinfer_native.h"\n',
    sources=[_rel(s) for s in SOURCES],
    include_dirs=[_rel("."), _rel("kernels")],
    extra_compile_args=[
        "-O3",
        # XINFER_NATIVE_MARCH=x86-64-v3 (AVX2) / x86-64 (portable C); the int8 dot products' paths
        # are built whatever the -march (their own #pragma GCC target) and chosen at run time
        # (native/kernels/xi_q8.h, XINFER_CPU_ISA)
        "-march=" + os.environ.get("XINFER_NATIVE_MARCH", "native"),
        "-fopenmp",
        "-fno-math-errno",
        # exact gguf dequantization and NaN semantics: no fast-math, no implicit FMA
        "-ffp-contract=off",
        "-std=gnu11",
    ],
    extra_link_args=["-fopenmp"],
)


if __name__ == "__main__":
    # In place: objects and the generated C under build/native/, the module copied into
    # xinfer_async/ under the name setuptools gives it (cffi's C uses the limited API,
    # so ``pip install -e .`` writes _native.abi3.so). A stale _native.cpython-*.so would
    # shadow it (it comes first in EXTENSION_SUFFIXES), so those are removed.
    import glob
    import shutil
    import sysconfig

    so = ffibuilder.compile(tmpdir=os.path.join(_ROOT, "build", "native"), verbose=False)
    pkg = os.path.join(_ROOT, "xinfer_async")
    abi3 = sysconfig.get_config_var("EXT_SUFFIX") and ".abi3.so" in __import__(
        "importlib.machinery").machinery.EXTENSION_SUFFIXES
    dest = os.path.join(pkg, "_native.abi3.so" if abi3 else os.path.basename(so))
    shutil.copyfile(so, dest + ".tmp")
    os.replace(dest + ".tmp", dest)  # atomic: never a half-written module
    for other in glob.glob(os.path.join(pkg, "_native*.so")):
        if os.path.abspath(other) != os.path.abspath(dest):
            os.remove(other)
    print(dest)
