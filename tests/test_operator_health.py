"""Issue 28 item 1: the operator's health endpoint tells the truth, against a real API server.

The chart's liveness probe asks ``/healthz`` on the metrics port: it must fail when the
operator is stopped (SIGSTOP: no answer) or its loop is stuck (503), and pass again when it
goes on; ``/readyz`` passes once the operator serves its role."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from fleetshare.operator.health import HealthServer
from tests.kube_harness import Harness, OperatorThread, wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def probe(port: int, path: str, timeout: float = 2.0) -> tuple[int, str]:
    """What the kubelet's httpGet probe sees: the status and body, or 0 on no answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (OSError, TimeoutError):
        return 0, ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_stuck_loop_fails_the_liveness_probe_and_recovers(kube: Harness, ns: str) -> None:
    """The loop blocks inside a reconcile (as a deadlocked call would): within
    ``stale_seconds`` /healthz answers 503 saying why; once it goes on, 200 again."""
    op = OperatorThread(kube, [ns], stale_seconds=2.0)
    operator = op.operator
    gate = threading.Event()
    gate.set()
    reconcile = operator.reconcile

    def blocking() -> Any:
        gate.wait()
        return reconcile()

    operator.reconcile = blocking  # type: ignore[method-assign]
    server = HealthServer(
        operator.metrics.registry, operator.stalled, operator.serving, 0, host="127.0.0.1"
    ).start()
    op.start()
    try:
        wait_for("ready", lambda: probe(server.port, "/readyz")[0] == 200, timeout=60)
        assert probe(server.port, "/healthz") == (200, "ok")
        status, body = probe(server.port, "/metrics")
        assert status == 200 and "fleetshare_" in body
        gate.clear()  # the next reconcile blocks
        wait_for("503", lambda: probe(server.port, "/healthz")[0] == 503, timeout=30)
        status, body = probe(server.port, "/healthz")
        assert "has not gone round" in body
        assert probe(server.port, "/readyz")[0] == 503
        gate.set()
        wait_for("healthy again", lambda: probe(server.port, "/healthz")[0] == 200, timeout=30)
    finally:
        gate.set()
        op.stop()
        server.stop()


def test_a_stopped_operator_process_fails_the_probe(kube: Harness, ns: str, tmp_path: Path) -> None:
    """``fleetshare operator --metrics-port``: healthy and ready while it runs; paused with
    SIGSTOP it does not answer (the probe fails); continued, it answers 200 again."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    log = tmp_path / "operator.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetshare.cli", "operator", "--kubeconfig",
         str(kube.kubeconfig), "-n", ns, "--no-leader-elect", "--metrics-port", str(port),
         "--stale-seconds", "5"],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        wait_for("ready", lambda: probe(port, "/readyz")[0] == 200, timeout=90)
        assert probe(port, "/healthz") == (200, "ok")
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.5)
        assert probe(port, "/healthz", timeout=2.0)[0] == 0
        proc.send_signal(signal.SIGCONT)
        wait_for("answers again", lambda: probe(port, "/healthz") == (200, "ok"), timeout=30)
    except AssertionError:
        print(log.read_text()[-5000:])
        raise
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
