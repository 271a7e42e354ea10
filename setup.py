# The cffi API-mode extension (our own C in native/) is built here, at install time; the CUDA C
# kernels (shaders/) go into the package, so a non-editable install has them too.
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    """Copies shaders/*.cu and *.cuh into the built package as xinfer_async/shaders, where
    backends/cuda looks (shader_dir) when the repository's shaders/ is not beside the package."""

    def run(self):
        super().run()
        dst = os.path.join(self.build_lib, "xinfer_async", "shaders")
        os.makedirs(dst, exist_ok=True)
        for path in glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "shaders", "*.cu*")):
            shutil.copy2(path, dst)


setup(cffi_modules=["native/build_native.py:ffibuilder"], cmdclass={"build_py": BuildPy})
