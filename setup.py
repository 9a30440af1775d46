"""The one compiled piece: an optional non-temporal copy (src/gpucomm/runtime/_stream.c).
Everything else is in pyproject.toml. Without a C compiler the package installs without it."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("gpucomm.runtime._stream", ["src/gpucomm/runtime/_stream.c"],
                             optional=True)])
