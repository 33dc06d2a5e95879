"""A real Prometheus (Debian's package) on loopback for the live scaler's tests: it scrapes,
every second, a tiny exporter serving ``chat_requests_total``, a counter whose rate the test
sets (:class:`Counter`), and any other target a test names (a real ``fleetshare serve``'s
``/metrics``, with its token)."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from tests.service_helpers import free_port

SKIPPED = (
    "PROMETHEUS TESTS SKIPPED: no prometheus binary (Debian: apt-get install -y prometheus; "
    ".ci/run does)"
)


class Counter:
    """A request counter whose rate the test sets; its value is the integral of the rate."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total, self.rate, self.since = 0.0, 0.0, time.monotonic()

    def value(self) -> float:
        with self.lock:
            now = time.monotonic()
            self.total += self.rate * (now - self.since)
            self.since = now
            return self.total

    def set_rate(self, rate: float) -> None:
        self.value()
        with self.lock:
            self.rate = rate


def binary() -> str | None:
    """The prometheus binary, if installed."""
    return shutil.which("prometheus")


@dataclass(frozen=True)
class Target:
    """Another scrape target: ``address`` (host:port) as job ``job``, with a bearer token."""

    job: str
    address: str
    token: str | None = None


def _scrape_config(target: Target) -> str:
    auth = f"    authorization: {{credentials: '{target.token}'}}\n" if target.token else ""
    return (
        f"  - job_name: {target.job}\n{auth}"
        f"    static_configs: [{{targets: ['{target.address}']}}]\n"
    )


@contextmanager
def running(workdir: Path, targets: Sequence[Target] = ()) -> Iterator[tuple[str, Counter]]:
    """Prometheus' address and the counter it scrapes, until the block ends; it scrapes
    ``targets`` too, every second."""
    path = binary()
    assert path is not None, SKIPPED
    counter = Counter()

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = (
                f"# TYPE chat_requests_total counter\nchat_requests_total {counter.value():.3f}\n"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    exporter = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    port = free_port()
    config = workdir / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: chat\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{exporter.server_address[1]}']}}]\n"
        + "".join(_scrape_config(t) for t in targets)
    )
    log_path = workdir / "prometheus.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                path,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'prometheus-data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        address = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(f"{address}/-/ready", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"prometheus did not start: {log_path.read_text()[-800:]}")
                time.sleep(0.2)
            yield address, counter
        finally:
            process.terminate()
            process.wait(timeout=10)
            exporter.shutdown()
