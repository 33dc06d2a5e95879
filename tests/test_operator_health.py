"""Issue 28 item 1: the operator's health endpoint tells the truth, against a real API server;
and two replicas with leader election survive the leader being stopped (SIGSTOP).

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
from fleetshare.operator.kube import JOBS
from fleetshare.operator.objects import ADMISSION
from fleetshare.policy.schema import load_policy
from tests.kube_harness import (
    G5,
    Harness,
    OperatorThread,
    admitted,
    apply_policy,
    gpu_job,
    wait_for,
)

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


def _replica(kube: Harness, ns: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    """``fleetshare operator`` with leader election (the Lease in ``ns``) and --metrics-port."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen(
        [sys.executable, "-m", "fleetshare.cli", "operator", "--kubeconfig",
         str(kube.kubeconfig), "-n", ns, "--lease-namespace", ns, "--metrics-port", str(port)],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip


def _leads(port: int) -> bool:
    status, body = probe(port, "/metrics")
    return status == 200 and "fleetshare_operator_leader 1.0" in body


def test_a_stopped_leader_replica_loses_the_lease_to_the_standby(
    kube: Harness, ns: str, tmp_path: Path
) -> None:
    """Issue 28, chaos: two operator processes with leader election on the real API server;
    the leader is stopped with SIGSTOP (not killed: it keeps its Lease until it expires). The
    standby takes the Lease once it lapses (15 s without a renewal) and admits what is
    created meanwhile; continued, the old leader finds the Lease gone, acts on nothing, and
    stops (its liveness probe would restart it as a standby). No Job is admitted twice, and
    the quota (2 GPUs) is never exceeded."""
    apply_policy(kube, load_policy({"teams": [{"name": "t", "quota": [
        {"resources": {"nvidia.com/gpu": 2, "cpu": 64, "memory": "256Gi"}}]}]}))  # fmt: skip
    kube.add_node(f"{ns}-n0", {**G5, "nvidia.com/gpu": "2"}, owner=ns)
    records: dict[str, set[str]] = {}
    most = [0]
    finished: set[str] = set()
    """Jobs whose pods the test made succeed: their quota is free from then on."""
    stop = threading.Event()

    def watch() -> None:  # every admission record each Job ever had, and how many ran at once
        while not stop.is_set():
            jobs = kube.kube.list(JOBS, ns)[0]
            for j in jobs:
                record = j["metadata"].get("annotations", {}).get(ADMISSION)
                if record:
                    records.setdefault(j["metadata"]["name"], set()).add(record)
            running = [j for j in jobs if not j["spec"].get("suspend")]
            most[0] = max(most[0], sum(j["metadata"]["name"] not in finished for j in running))
            stop.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    ports = free_port(), free_port()
    log = tmp_path / "operators.log"
    first = _replica(kube, ns, ports[0], log)
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_for("the first replica leads", lambda: _leads(ports[0]), timeout=90)
        second = _replica(kube, ns, ports[1], log)
        wait_for("the standby is ready", lambda: probe(ports[1], "/readyz")[0] == 200, timeout=90)
        assert not _leads(ports[1])
        kube.kube.create(JOBS, gpu_job(ns, "one", "t", 1), ns)
        wait_for("one admitted", lambda: admitted(kube, ns, "one"), timeout=30)

        first.send_signal(signal.SIGSTOP)
        assert probe(ports[0], "/healthz", timeout=1.0)[0] == 0  # no answer: the probe fails
        kube.kube.create(JOBS, gpu_job(ns, "two", "t", 1), ns)
        wait_for("the standby leads", lambda: _leads(ports[1]), timeout=90)
        wait_for("two admitted by the new leader", lambda: admitted(kube, ns, "two"), timeout=30)
        assert first.poll() is None  # still there, stopped

        first.send_signal(signal.SIGCONT)
        assert first.wait(timeout=60) == 0  # it stopped on its own: leadership lost
        assert "leadership lost: stopping" in log.read_text()
        kube.kube.create(JOBS, gpu_job(ns, "three", "t", 1), ns)  # over quota: it waits
        finished.add("one")
        kube.kubelet.finish_job(ns, "one")
        wait_for("three admitted once one finished", lambda: admitted(kube, ns, "three"),
                 timeout=30)  # fmt: skip
        assert _leads(ports[1]) and probe(ports[1], "/healthz") == (200, "ok")
        wait_for("the watcher saw three admitted", lambda: "three" in records)
        stop.set()
        watcher.join(timeout=10)
        # an admission is written once: a second would have rewritten the record
        assert {name: len(seen) for name, seen in records.items()} == dict.fromkeys(
            ("one", "two", "three"), 1
        ), records
        assert most[0] <= 2, f"{most[0]} jobs ran at once on a quota of 2 GPUs"
    except AssertionError:
        print(log.read_text()[-6000:])
        raise
    finally:
        stop.set()
        for proc in (first, second):
            if proc is None:
                continue
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
