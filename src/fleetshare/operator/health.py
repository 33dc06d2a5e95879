"""The operator's HTTP endpoint for the kubelet and Prometheus (``--metrics-port``).

* ``/metrics``: the Prometheus metrics (:mod:`fleetshare.operator.metrics`).
* ``/healthz``: 200 ``ok`` while the operator's loop goes round (standby, syncing or
  leading), else 503 with why (:meth:`Operator.stalled`): the chart's liveness probe, so a
  hung operator is restarted. A stopped process does not answer at all, which the probe
  counts as a failure too.
* ``/readyz``: 200 once the operator serves its role (a standby waiting for the lease, or a
  leader that reconciled once), else 503.

Served with the standard library's threading HTTP server, as prometheus-client's own
``start_http_server`` is, with the two probes beside its metrics.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class HealthServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` in a thread."""

    def __init__(
        self,
        registry: CollectorRegistry,
        stalled: Callable[[], str | None],
        ready: Callable[[], bool],
        port: int,
        host: str = "0.0.0.0",
    ) -> None:
        """``stalled``: why the operator is unhealthy (None: healthy); ``ready``: serving."""

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._answer(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    why = stalled()
                    self._answer(200 if why is None else 503, (why or "ok").encode())
                elif path == "/readyz":
                    up = ready() and stalled() is None
                    self._answer(200 if up else 503, b"ok" if up else b"not ready")
                else:
                    self._answer(404, b"not found")

            def _answer(self, code: int, body: bytes, kind: str = "text/plain") -> None:
                # a prober that gave up (its timeout passed while this process was stopped
                # or busy) has closed the connection: nobody to answer, nothing to log
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(code)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # probes every few seconds: not worth a log line each

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="fleetshare-health", daemon=True
        )

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
