"""A Python interpreter that runs README blocks in one namespace, like a notebook's kernel.

Run as ``python -m tests.integration.readme.kernel LOG``. It reads one JSON request per line on
stdin (``code``, ``filename``, ``line``, ``cwd``, ``env``) and answers one JSON line
(``{"error": null}`` or ``{"error": "<traceback>"}``) on its original stdout. Everything the
blocks print - and whatever they start (Spark's JVM, subprocesses) - goes to LOG.

A process of its own, started from the README's terminal environment, because that is what a
user has: a Spark session the README starts gets that environment (its Python workers connect
to the catalog with it), and no pytest warning filter or logging set-up leaks in.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, TextIO


def _redirect_output(log_path: str) -> TextIO:
    """Send fds 1 and 2 to the log; return a stream on the original stdout for replies."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    return replies


def _use_environment(env: dict[str, str], cwd: str) -> None:
    """The terminal's exports as they are now (a user's ``os.environ`` after ``export``)."""
    for name in set(os.environ) - set(env):
        del os.environ[name]
    os.environ.update(env)
    os.chdir(cwd)


def run(request: dict[str, Any], namespace: dict[str, Any]) -> str | None:
    _use_environment(request["env"], request["cwd"])
    source = "\n" * (request["line"] - 1) + request["code"]  # tracebacks name README lines
    try:
        exec(compile(source, request["filename"], "exec"), namespace)
    except BaseException:
        return traceback.format_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return None


def _close(namespace: dict[str, Any]) -> None:
    """Close what the README opened (catalog pools, a Spark session) before exiting."""
    for value in list(namespace.values()):
        kind = type(value).__name__
        if kind == "Catalog":
            value.close()
        elif kind == "SparkSession":
            value.stop()


def main() -> None:
    replies = _redirect_output(sys.argv[1])
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for line in sys.stdin:
        error = run(json.loads(line), namespace)
        replies.write(json.dumps({"error": error}) + "\n")
    _close(namespace)


if __name__ == "__main__":
    main()
