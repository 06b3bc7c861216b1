"""The one C extension (``ingest.sink._holdscan``: the tasks' per-event hold and the driver's END
markers of ``transactions: consistent``; see its source).

Everything else about the package is in pyproject.toml. The extension is optional: without a C
compiler the package installs and the same loops run in Python (``HeldSplit.fast_py``,
``markers.decode_end``). The module carries the SHA-256 of the source it was built from, so a
build older than its source is never used (``ingest.sink.native.load``; ``LOOPS`` says which
loops run).
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "ingest/sink/_holdscan.c"
DIGEST = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()

setup(
    ext_modules=[
        Extension(
            "ingest.sink._holdscan",
            [SOURCE],
            define_macros=[("HOLDSCAN_SOURCE_SHA256", f'"{DIGEST}"')],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
