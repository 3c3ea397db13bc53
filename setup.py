"""The one thing pyproject.toml cannot say: the optional C extension (the native span index).

`optional=True`: when it cannot be built (no C compiler, no Python headers) setuptools warns and the
install goes on without it; `wt_otel.ingest.spanindex` then runs its pure-Python fallback (upb on a lean schema).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("wt_otel.ingest._spanindex", ["wt_otel/ingest/_spanindex.c"], optional=True,
                             extra_compile_args=["-O2"])])
