"""Admission writes that do not hold the operator's loop, through the real API server (see
tests/kube_harness.py): a write refused because the Job changed between the decision and the
write, writes slowed down while the loop goes on, and the operator killed with writes in
flight."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fleetshare.operator.controller import TEAMS
from fleetshare.operator.kube import JOBS, Kube, Resource
from fleetshare.operator.objects import ADMISSION, PENDING_REASON
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
ROOT = Path(__file__).resolve().parent.parent


def _admits(res: Resource, body: Any) -> bool:
    """An admission write of a Job: the JSON patch that unsuspends it."""
    return (
        res.plural == "jobs"
        and isinstance(body, list)
        and any(op.get("path") == "/spec/suspend" and op.get("value") is False for op in body)
    )


def _policy(kube: Harness, ns: str, gpus: int) -> None:
    apply_policy(kube, load_policy({"teams": [{"name": "t", "quota": [
        {"resources": {"nvidia.com/gpu": gpus, "cpu": 64, "memory": "256Gi"}}],
        "borrow_limits": [{"absolute": 0}]}]}))  # fmt: skip
    for i in range(gpus + 1):  # one node more than the quota: the quota binds
        kube.add_node(f"{ns}-n{i}", G5, owner=ns)


def _admitted_events(kube: Harness, ns: str) -> list[str]:
    return sorted(
        e["involvedObject"]["name"] for e in kube.events(ns)
        if e["reason"] == "Admitted" and e["involvedObject"]["kind"] == "Job"
    )  # fmt: skip


def _used_gpus(kube: Harness) -> str | None:
    status = kube.kube.get(TEAMS, "t").get("status") or {}
    used: str | None = (status.get("used") or {}).get("nvidia.com/gpu")
    return used


class Sampler:
    """Samples the namespace's Jobs every 50 ms: the most admitted at once, and every
    admission record each Job ever carried (a second admission would write another)."""

    def __init__(self, kube: Harness, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.most = 0
        self.records: dict[str, set[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            jobs = self.kube.kube.list(JOBS, self.ns)[0]
            for j in jobs:
                record = (j["metadata"].get("annotations") or {}).get(ADMISSION)
                if record:
                    self.records.setdefault(j["metadata"]["name"], set()).add(record)
            self.most = max(self.most, sum(not j["spec"].get("suspend") for j in jobs))
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class InterferingKube(Kube):
    """Edits Job ``target`` (a label, through another client) just before the operator's
    first admission write of it: the write meets a changed object and is refused."""

    def __init__(self, api: Any, other: Kube, target: str) -> None:
        super().__init__(api)
        self.other, self.target = other, target
        self.attempts = 0

    def patch(self, res: Resource, name: str, body: Any, namespace: str | None = None,
              **kwargs: Any) -> dict[str, Any]:  # fmt: skip
        if _admits(res, body) and name == self.target:
            self.attempts += 1
            if self.attempts == 1:
                self.other.patch(JOBS, name, {"metadata": {"labels": {"edited": "yes"}}}, namespace)
        return super().patch(res, name, body, namespace, **kwargs)


def test_a_refused_admission_write_goes_back_to_pending_and_keeps_the_quota_right(
    kube: Harness, ns: str
) -> None:
    _policy(kube, ns, 2)
    for name in ("x", "y"):
        kube.kube.create(JOBS, gpu_job(ns, name, "t", 1), ns)
    client = InterferingKube(kube.plane.client().api, kube.kube, "x")
    sampler = Sampler(kube, ns)
    op = OperatorThread(kube, [ns], kube=client).start()
    try:
        wait_for("x and y admitted", lambda: admitted(kube, ns, "x") and admitted(kube, ns, "y"))
        assert client.attempts == 2  # refused once (the Job had changed), then written
        assert kube.job(ns, "x")["metadata"]["labels"]["edited"] == "yes"
        kube.kube.create(JOBS, gpu_job(ns, "z", "t", 1), ns)  # the quota is full: z waits
        wait_for("z says why it waits",
                 lambda: (kube.job(ns, "z")["metadata"].get("annotations") or {}).get(
                     PENDING_REASON))  # fmt: skip
        wait_for("the team uses 2 GPUs", lambda: _used_gpus(kube) == "2")
        assert not admitted(kube, ns, "z")
        wait_for("one Admitted Event each", lambda: _admitted_events(kube, ns) == ["x", "y"])
        assert sampler.most <= 2
        assert all(len(v) == 1 for v in sampler.records.values()), sampler.records
    finally:
        sampler.stop()
        op.stop()


class SlowKube(Kube):
    """Each admission write waits ``delay`` seconds before it is sent."""

    def __init__(self, api: Any, delay: float) -> None:
        super().__init__(api)
        self.delay = delay
        self.answered: list[float] = []

    def patch(self, res: Resource, name: str, body: Any, namespace: str | None = None,
              **kwargs: Any) -> dict[str, Any]:  # fmt: skip
        if not _admits(res, body):
            return super().patch(res, name, body, namespace, **kwargs)
        time.sleep(self.delay)
        out = super().patch(res, name, body, namespace, **kwargs)
        self.answered.append(time.monotonic())
        return out


def test_reconcile_returns_before_slow_admission_writes_are_answered(
    kube: Harness, ns: str
) -> None:
    _policy(kube, ns, 4)
    names = [f"job-{i}" for i in range(6)]
    for name in names:
        kube.kube.create(JOBS, gpu_job(ns, name, "t", 1), ns)
    client = SlowKube(kube.plane.client().api, delay=2.0)
    sampler = Sampler(kube, ns)
    op = OperatorThread(kube, [ns], kube=client)
    operator = op.operator
    turns: list[tuple[float, int, int]] = []  # (end, running in the view, writes outstanding)
    reconcile = operator.reconcile

    def recorded() -> float:
        try:
            return reconcile()
        finally:
            writer = operator.cluster.writer
            outstanding = writer.outstanding() if writer is not None else 0
            turns.append((time.monotonic(), len(operator.cluster.running), outstanding))

    operator.reconcile = recorded  # type: ignore[method-assign]
    op.start()
    try:
        wait_for("4 jobs admitted", lambda: sum(admitted(kube, ns, n) for n in names) == 4)
        first_answer = min(client.answered)
        assumed = [t for t in turns if t[1] == 4 and t[2] == 4]
        assert assumed and assumed[0][0] < first_answer  # the loop counted 4 before any answer
        for name in [n for n in names if not admitted(kube, ns, n)]:
            wait_for(f"{name} says why it waits",
                     lambda n=name: (kube.job(ns, n)["metadata"].get("annotations") or {}).get(
                         PENDING_REASON))  # type: ignore[misc]  # fmt: skip
        wait_for("the team uses 4 GPUs", lambda: _used_gpus(kube) == "4")
        time.sleep(1)
        assert sum(admitted(kube, ns, n) for n in names) == 4
        assert sampler.most <= 4, f"{sampler.most} jobs admitted at once on a quota of 4"
        assert all(len(v) == 1 for v in sampler.records.values()), sampler.records
    finally:
        sampler.stop()
        op.stop()


SLOW_OPERATOR = """
import sys, threading, time
from fleetshare.operator.controller import Operator, Settings
from fleetshare.operator.kube import Kube, load_client

class Slow(Kube):
    def patch(self, res, name, body, namespace=None, **kwargs):
        admits = res.plural == "jobs" and isinstance(body, list) and any(
            op.get("path") == "/spec/suspend" and op.get("value") is False for op in body)
        if not admits:
            return super().patch(res, name, body, namespace, **kwargs)
        print("sending", name, flush=True)
        time.sleep(1.0)
        out = super().patch(res, name, body, namespace, **kwargs)
        print("answered", name, flush=True)
        return out

kube = Slow(load_client(sys.argv[1]))
settings = Settings(namespaces=(sys.argv[2],), leader_elect=False, write_threads=1)
Operator(kube, settings).run(threading.Event())
"""


def test_killed_with_admission_writes_in_flight_admits_nothing_twice(
    kube: Harness, ns: str, tmp_path: Path
) -> None:
    """An operator whose admission writes take 1 s each, one at a time, is SIGKILLed just
    after its first write landed (the others handed over, not sent); a normal operator
    started after it admits the rest: each Job admitted once, never more than the quota,
    and the Team's usage is the sum over the admitted Jobs."""
    _policy(kube, ns, 4)
    names = [f"job-{i}" for i in range(8)]
    for name in names:
        kube.kube.create(JOBS, gpu_job(ns, name, "t", 1), ns)
    sampler = Sampler(kube, ns)
    script = tmp_path / "slow_operator.py"
    script.write_text(SLOW_OPERATOR)
    out = tmp_path / "slow.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    slow = subprocess.Popen([sys.executable, str(script), str(kube.kubeconfig), ns],
                            stdout=out.open("wb"), stderr=subprocess.STDOUT, env=env)  # fmt: skip
    proc: subprocess.Popen[bytes] | None = None
    try:
        wait_for("a first admission answered", lambda: "answered" in out.read_text(), timeout=60)
        slow.send_signal(signal.SIGKILL)
        slow.wait()
        lines = out.read_text().split()
        landed = {lines[i + 1] for i, w in enumerate(lines) if w == "answered"}
        sent = {lines[i + 1] for i, w in enumerate(lines) if w == "sending"}
        assert landed and len(landed) < 4  # killed with writes in flight
        before = {n for n in names if admitted(kube, ns, n)}
        assert before == landed  # what landed is admitted, nothing else
        log = tmp_path / "operator.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleetshare.cli", "operator", "--kubeconfig",
             str(kube.kubeconfig), "-n", ns, "--no-leader-elect", "-v"],
            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        wait_for("4 jobs admitted", lambda: sum(admitted(kube, ns, n) for n in names) == 4,
                 timeout=60)  # fmt: skip
        wait_for("the team uses 4 GPUs", lambda: _used_gpus(kube) == "4", timeout=30)
        time.sleep(2)  # settled: nothing more happens
        after = {n for n in names if admitted(kube, ns, n)}
        assert len(after) == 4 and before <= after, (before, after, sent)
        assert sampler.most <= 4, f"{sampler.most} jobs admitted at once on a quota of 4"
        assert set(sampler.records) == after  # an admission record only on the admitted
        assert all(len(v) == 1 for v in sampler.records.values()), sampler.records
        records = [json.loads(next(iter(sampler.records[n]))) for n in sorted(after)]
        assert all(r["team"] == "t" for r in records)
    finally:
        sampler.stop()
        if slow.poll() is None:
            slow.kill()
            slow.wait()
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
