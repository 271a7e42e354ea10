# The cffi API-mode extension (our own C in native/) is built here, at install time.
from setuptools import setup

setup(cffi_modules=["native/build_native.py:ffibuilder"])
