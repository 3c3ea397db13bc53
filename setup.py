"""The one thing pyproject.toml cannot say: the optional C extensions (the native span index and wire check).

`optional=True`: when they cannot be built (no C compiler, no Python headers) setuptools warns and the
install goes on without them; `wt_otel.ingest.spanindex` then runs its pure-Python fallback (upb on a lean
schema) and `wt_otel.ingest.wirecheck` asks upb itself.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension(f"wt_otel.ingest.{name}", [f"wt_otel/ingest/{name}.c"], optional=True,
                             depends=["wt_otel/ingest/_utf8.h"], extra_compile_args=["-O2"])
                   for name in ("_spanindex", "_wirecheck")])
