"""The small HTTP server of the long-running commands: ``GET /metrics`` and ``GET /healthz``.

Shared by ``lakestream compactor run`` and ``lakestream ingest``. It lives in ``jobs`` because
only the entry points serve HTTP: the metrics themselves stay with the package that counts them
(``compaction.metrics``, ``ingest.metrics``), which hands this server two callables.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST


class HealthState(Protocol):
    """What ``/healthz`` answers: 200 when ``ok``, else 503; ``detail`` goes into the JSON."""

    @property
    def ok(self) -> bool: ...

    @property
    def detail(self) -> Mapping[str, Any]: ...


class MetricsServer:
    """``GET /metrics`` (Prometheus text format) and ``GET /healthz`` (200 or 503, JSON)."""

    def __init__(
        self,
        exposition: Callable[[], bytes],
        health: Callable[[], HealthState],
        host: str,
        port: int,
    ) -> None:
        handler = _handler(exposition, health)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(
    exposition: Callable[[], bytes], health: Callable[[], HealthState]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, exposition())
            elif path == "/healthz":
                state = health()
                body = json.dumps(
                    {"status": "ok" if state.ok else "unhealthy", **state.detail}, default=str
                )
                self._send(200 if state.ok else 503, "application/json", body.encode())
            else:
                self._send(404, "text/plain", b"not found: try /metrics or /healthz\n")

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Scrapes are not worth a log line each."""

    return Handler
