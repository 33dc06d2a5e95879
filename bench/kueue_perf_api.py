"""Benchmark: Kueue's scheduler performance scenario through a real kube-apiserver, governed
by the fleetshare operator.

The scenario is Kueue's (``test/performance/scheduler``, ``configs/baseline/generator.yaml``;
:mod:`fleetshare.traces.kueue_generator` builds the same for the simulator): 5 cohorts x 6
ClusterQueues (20 CPU nominal, 100 CPU borrowing limit), 500 workloads per queue (350 small
1-CPU 200 ms, 100 medium 5-CPU 500 ms, 50 large 20-CPU 1 s, arriving every 100 / 500 / 1200
ms), 15,000 in all. Here:

- the control plane is the test harness's (``tests/kube_harness.py``: etcd, kube-apiserver,
  kube-scheduler, kube-controller-manager's Job controller), with the schedulers' and Job
  controller's client limits raised and kube-apiserver's in-flight limits raised as Kueue's
  runner raises them (800 / 400);
- the policy is what ``fleetshare import kueue`` makes of Kueue's objects (the trace's), as
  ClusterPolicy and Team objects; Nodes of the trace (5 x 120 CPU = the nominal quota);
- each workload is a ``batch/v1`` Job, created suspended with Kueue's labels (queue name,
  priority class, class, running time), one pod requesting the workload's CPU, at the
  generator's arrival time (the k-th of a set at (k + 1) x its interval) by a pool of
  creator threads with no client limit (Kueue's generator uses the runner's client);
- the operator (:class:`~fleetshare.operator.controller.Operator`, in a process of its own as
  Kueue's runner runs its controller, or with ``--operator-in-process`` on a thread) admits
  through a client limited like Kueue's controller's (``--qps`` 50, burst 100: minimalkueue's
  ``kubeConfig.QPS = 50; Burst = 100``) or not at all (``--qps 0``);
- a timed kubelet (the harness's fake kubelet, watching instead of listing; 16 threads write
  pod status, standing for the nodes' kubelets) marks a bound pod Running and, once the
  workload's running time has passed, Succeeded; the operator frees the quota then (the
  Job's pods succeeded: :func:`~fleetshare.operator.kinds.job_pods_succeeded`), and the Job
  controller completes the Job later. Kueue's runner instead marks the Workload Finished its
  running time after admission: here the running time starts when the pod runs, so Job
  controller, scheduler and kubelet latency count as admitted time;
- a recorder watches the Jobs and their pods: a workload is created when its POST returns,
  admitted each time its Job turns unsuspended under the operator's admission annotation,
  released when it is finished by the operator's rule (:func:`job_phase` of the Job and its
  pods) or suspended again. The measures are Kueue's (:mod:`kueue_measures`); wall is from
  the first creation to the last release.

``--scale tenth`` runs 1 cohort x 3 queues (1,500 workloads, one 60-CPU node): each queue's
load, quota and arrivals are Kueue's, the cluster a tenth.

    PYTHONPATH=src .venv/bin/python bench/kueue_perf_api.py --scale tenth --qps 50
    PYTHONPATH=src .venv/bin/python bench/kueue_perf_api.py --out bench/results/kueue_perf_api.json
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.kube_harness

from kueue_measures import (  # noqa: E402
    Observed,
    Stamped,
    epoch,
    kueue_measures,
    server_measures,
    usage_timeline,
)
from run_info import machine, proc_cpu_s  # noqa: E402

SCALES: dict[str, dict[str, int]] = {
    "full": {"cohorts": 5, "queues_per_cohort": 6, "node_cpus": 120},
    "tenth": {"cohorts": 1, "queues_per_cohort": 3, "node_cpus": 60},
}


def shape_of(scale: str) -> dict[str, int]:
    """A scale's shape: a name of :data:`SCALES` or ``CxQ`` (C cohorts x Q queues, on nodes of
    the largest size up to 120 CPU that divides the nominal quota, at least 20 CPU)."""
    if scale in SCALES:
        return SCALES[scale]
    try:
        cohorts, queues = (int(n) for n in scale.lower().split("x"))
    except ValueError:
        raise ValueError(f"scale must be one of {sorted(SCALES)} or CxQ; got {scale!r}") from None
    total = 20 * cohorts * queues
    node = max(n for n in range(20, 121) if total % n == 0) if total >= 20 else 0
    if cohorts < 1 or queues < 1 or node == 0:
        raise ValueError(f"scale {scale!r}: no node size of 20-120 CPU divides {total} CPU")
    return {"cohorts": cohorts, "queues_per_cohort": queues, "node_cpus": node}


KUEUE_PUBLISHED = {
    "wall_s": 351,
    "average_usage_percent": [55.9, 58.7],
    "mean_time_to_admission_s": {"small": 215, "medium": 77, "large": 16.5},
    "controller_client": {"qps": 50, "burst": 100},
}
TARGET = {"wall_s": 120.0, "average_usage_percent": 80.0}
FAST_CLIENTS = {
    "kube-scheduler": ["--kube-api-qps=1000", "--kube-api-burst=2000"],
    "kube-controller-manager": [
        "--kube-api-qps=1000",
        "--kube-api-burst=2000",
        "--concurrent-job-syncs=20",
    ],
    "kube-apiserver": ["--max-requests-inflight=800", "--max-mutating-requests-inflight=400"],
}
"""The other components must not be the bottleneck: Kueue's run has none of them."""
IMAGE = "registry.example/kueue-perf:1"


# -- the workloads as Jobs (pure) -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Arrival:
    """One Job to create ``at`` seconds after the start."""

    at: float
    namespace: str
    body: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


def job_manifest(workload: Any) -> dict[str, Any]:
    """The suspended ``batch/v1`` Job of one generator workload, with Kueue's labels."""
    from fleetshare.manifests.parse import PRIORITY_LABEL
    from fleetshare.model.resources import CPU
    from fleetshare.traces.kueue_generator import CLASS_LABEL, QUEUE_LABEL, RUNNING_LABEL

    namespace, name = workload.name.split("/", 1)
    labels = workload.labels
    millicpu = workload.total_requests()[CPU]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                QUEUE_LABEL: labels[QUEUE_LABEL],
                PRIORITY_LABEL: workload.priority_class,
                CLASS_LABEL: labels[CLASS_LABEL],
                RUNNING_LABEL: labels[RUNNING_LABEL],
            },
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "suspend": True,
            "template": {
                "metadata": {"labels": {RUNNING_LABEL: labels[RUNNING_LABEL]}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": IMAGE,
                            "resources": {"requests": {"cpu": f"{millicpu}m"}},
                        }
                    ],
                },
            },
        },
    }


def arrivals(trace: Any) -> list[Arrival]:
    """Every workload of the trace as a Job, in arrival order."""
    out = []
    for w in trace.workloads:
        body = job_manifest(w)
        out.append(Arrival(w.submit_time, body["metadata"]["namespace"], body))
    return out


def observed_of(
    created: Mapping[str, float],
    spans: Mapping[str, list[list[float | None]]],
    classes: Mapping[str, tuple[str, float, float]],
) -> list[Observed]:
    """The recorder's times per Job (``ns/name``) as :class:`Observed` records;
    ``classes`` gives each Job's (class, CPU, running time)."""
    out = []
    for key, (cls, cpu, runtime) in classes.items():
        if key not in created:
            continue
        admissions = [(float(a), b) for a, b in spans.get(key, ()) if a is not None]
        out.append(Observed(cls, cpu, created[key], admissions, runtime))
    return out


# -- the pieces that talk to the API server -----------------------------------------------------


def unfinished_keys(jobs: list[Arrival], finished: set[str], n: int = 5) -> list[str]:
    """Up to ``n`` Jobs (``ns/name``) not finished, in arrival order."""
    out = []
    for a in jobs:
        key = f"{a.namespace}/{a.name}"
        if key not in finished:
            out.append(key)
            if len(out) >= n:
                break
    return out


def view_of(operator: Any, keys: list[str]) -> dict[str, list[str]]:
    """Where each Job is in the operator's view (tracked, pending, running, blocked)."""
    cluster = operator.cluster
    return {key: [k for k, d in (("tracked", cluster.tracked), ("pending", cluster.pending),
                                 ("running", cluster.running), ("blocked", cluster.blocked))
                  if key in d]
            for key in keys}  # fmt: skip


def unfinished_sample(
    kube: Any, keys: list[str], views: Mapping[str, list[str]]
) -> list[dict[str, Any]]:
    """What the API and the operator's view (``views``) say of Jobs not finished when the
    run ended (for a run that timed out)."""
    from fleetshare.operator.kube import JOBS

    out: list[dict[str, Any]] = []
    for key in keys:
        namespace, name = key.split("/", 1)
        try:
            job = kube.get(JOBS, name, namespace)
        except Exception as exc:
            out.append({"job": key, "error": str(exc)[:200]})
        else:
            out.append({
                "job": key,
                "suspend": job["spec"].get("suspend"),
                "annotations": sorted(job["metadata"].get("annotations") or {}),
                "status": job.get("status"),
                "view": views.get(key),
            })  # fmt: skip
    return out


def job_write_kind(body: Any, path: str) -> str:
    """What a PATCH of a Job is for: ``admit`` (the JSON patch unsuspending it), ``suspend``
    (an eviction or a Job created unsuspended), ``pending reason``, ``status`` or ``other``."""
    if path.endswith("/status"):
        return "status"
    if isinstance(body, list):
        for op in body:
            if op.get("path") == "/spec/suspend":
                return "admit" if op.get("value") is False else "suspend"
        return "other"
    annotations = ((body or {}).get("metadata") or {}).get("annotations") or {}
    return "pending reason" if any(k.endswith("pending-reason") for k in annotations) else "other"


def _role(thread: str) -> str:
    """What a thread of the operator does (for the token waits)."""
    for prefix, role in (("admission-write", "admission writer"), ("operator", "loop"),
                         ("watch-", "watches"), ("events-", "events")):  # fmt: skip
        if thread.startswith(prefix):
            return role
    return "other"


def throttled(kube: Any, qps: float, burst: int) -> Any:
    """``kube`` with client-go's token bucket (``qps`` tokens a second, ``burst`` at most)
    in front of every request, watches included; counts requests per verb and kind."""
    from fleetshare.operator.kube import Kube

    class Throttled(Kube):
        def __init__(self) -> None:
            super().__init__(kube.api)
            self.lock = threading.Lock()
            self.tokens = float(burst)
            self.last = time.monotonic()
            self.counts: Counter[str] = Counter()
            self.job_writes: Counter[str] = Counter()
            """PATCHes of Jobs by purpose (:func:`job_write_kind`)."""
            self.waited: Counter[str] = Counter()
            """Seconds spent waiting for a token, by the waiting thread's role."""

        def _send(self, method: str, path: str, **kw: Any) -> Any:
            parts = path.strip("/").split("/")
            what = parts[-1] if len(parts) % 2 == 1 else parts[-2]
            if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
                what = parts[parts.index("namespaces") + 2]
            watch = (kw.get("query") or {}).get("watch")
            with self.lock:
                self.counts[f"{'WATCH' if watch else method} {what}"] += 1
                if method == "PATCH" and what == "jobs":
                    self.job_writes[job_write_kind(kw.get("body"), path)] += 1
            if qps > 0:
                began = time.monotonic()
                while True:
                    with self.lock:
                        now = time.monotonic()
                        self.tokens = min(float(burst), self.tokens + (now - self.last) * qps)
                        self.last = now
                        if self.tokens >= 1:
                            self.tokens -= 1
                            break
                        wait = (1 - self.tokens) / qps
                    time.sleep(wait)
                if now > began:
                    with self.lock:
                        self.waited[_role(threading.current_thread().name)] += now - began
            return super()._send(method, path, **kw)

    return Throttled()


def make_operator(
    kubeconfig: str | None, qps: float, burst: int, plain: bool, client: Any = None
) -> tuple[Any, Any]:
    """The operator under test and its client: limited to ``qps`` / ``burst`` (0: not at
    all), its Events through a second client limited alike (controller-runtime's event
    recorder has its own clientset, so Kueue's events do not spend its 50 QPS either), the
    incremental view unless ``plain``, no leader election. ``client`` makes a fresh
    unthrottled client (default: from ``kubeconfig``)."""
    from fleetshare.operator.controller import Operator, Settings
    from fleetshare.operator.kube import Kube, load_client

    def fresh() -> Any:
        return client() if client is not None else Kube(load_client(kubeconfig))

    op_kube = throttled(fresh(), qps, burst)
    operator = Operator(op_kube, Settings(leader_elect=False, install_crds=False,
                                          incremental=not plain))  # fmt: skip
    operator.events.kube = throttled(fresh(), qps, burst)
    return operator, op_kube


class OperatorMeter:
    """The operator's statistics over the measured run: :meth:`ready` once it reconciled
    (the setup's requests end there), :meth:`start` when the first Job is due,
    :meth:`stats` at the end. Wraps the operator's reconcile to time it."""

    def __init__(self, operator: Any, op_kube: Any) -> None:
        self.operator, self.op_kube = operator, op_kube
        self.setup_requests = 0
        self.reconciles0 = 0
        self.writes0: Counter[str] = Counter()
        self.busy = 0.0
        self.spent: list[float] = []

    def ready(self) -> None:
        self.setup_requests = sum(self.op_kube.counts.values())

    def start(self) -> None:
        self.reconciles0 = self.operator.reconciles
        self.writes0 = Counter(self.op_kube.job_writes)
        reconcile = self.operator.reconcile

        def timed_reconcile() -> float:
            t, wall = time.thread_time(), time.monotonic()
            try:
                return float(reconcile())
            finally:
                self.busy += time.thread_time() - t
                self.spent.append(time.monotonic() - wall)

        self.operator.reconcile = timed_reconcile

    def stats(self) -> dict[str, Any]:
        """The measures of the operator (JSON), keys as in the report."""
        counts, spent = self.op_kube.counts, self.spent
        job_writes = Counter(self.op_kube.job_writes)
        job_writes.subtract(self.writes0)
        return {
            "operator_reconciles": self.operator.reconciles - self.reconciles0,
            "operator_requests": sum(counts.values()) - self.setup_requests,
            "operator_requests_by_kind": dict(counts.most_common(12)),
            "operator_job_writes": dict(job_writes.most_common()),
            "operator_reconcile_cpu_s": round(self.busy, 1),
            "operator_reconcile_wall_s": {
                "total": round(sum(spent), 1),
                "mean": round(sum(spent) / max(len(spent), 1), 3),
                "p99": round(sorted(spent)[int(0.99 * (len(spent) - 1))], 3) if spent else None,
                "max": round(max(spent, default=0.0), 3),
            },
            "operator_token_wait_s": {k: round(v, 1) for k, v in self.op_kube.waited.most_common()},
            "event_requests": sum(self.operator.events.kube.counts.values()),
            "events_combined": self.operator.events.combined,
        }


def operator_child(kubeconfig: str, qps: float, burst: int, plain: bool, stats_path: Path) -> int:
    """The operator in a process of its own (``--operator-child``), as Kueue's runner runs
    minimalkueue. Protocol on stdin/stdout (one line each): prints ``ready`` once it
    reconciled; ``start`` on stdin starts the measures; then a JSON list of Job keys (the
    unfinished sample) or EOF (or SIGTERM) stops it. It writes :meth:`OperatorMeter.stats`
    plus ``views`` (where those Jobs are in its view) and ``operator_process_cpu_s`` (the
    whole process's CPU over the measures) to ``stats_path``."""
    import signal

    operator, op_kube = make_operator(kubeconfig, qps, burst, plain)
    meter = OperatorMeter(operator, op_kube)
    stop = threading.Event()

    def terminate(*_: Any) -> None:
        stop.set()
        raise EOFError  # ends the read of stdin below

    signal.signal(signal.SIGTERM, terminate)
    error: list[BaseException] = []

    def loop() -> None:
        try:
            operator.run(stop)
        except BaseException as exc:
            error.append(exc)
            stop.set()

    thread = threading.Thread(target=loop, name="operator", daemon=True)
    thread.start()
    while not operator.ready.wait(0.5):
        if stop.is_set():
            raise SystemExit(f"the operator stopped before reconciling: {error}")
    meter.ready()
    print("ready", flush=True)
    keys: list[str] = []
    cpu0 = time.process_time()
    samples: list[list[float]] = []
    with contextlib.suppress(EOFError):
        for line in sys.stdin:
            if line.strip() == "start":
                meter.start()
                cpu0 = time.process_time()
                threading.Thread(target=sample_view, args=(operator, samples, stop),
                                 name="sampler", daemon=True).start()  # fmt: skip
            elif line.strip():
                keys = [str(k) for k in json.loads(line)]
                break
    views = view_of(operator, keys)
    cpu = time.process_time() - cpu0
    stop.set()
    thread.join(timeout=15)
    out = {**meter.stats(), "views": views, "operator_process_cpu_s": round(cpu, 1),
           "view_samples": samples}  # fmt: skip
    stats_path.write_text(json.dumps(out))
    return 1 if error else 0


def sample_view(operator: Any, samples: list[list[float]], stop: threading.Event) -> None:
    """Every second until ``stop``: (monotonic time, workloads pending, admitted, CPU
    admitted, admission writes outstanding) in the operator's view (admitted includes the
    writes not answered yet: the loop counts them admitted)."""
    from fleetshare.model.resources import CPU

    cluster = operator.cluster
    while not stop.wait(1.0):
        try:
            running = list(cluster.running.values())
        except RuntimeError:  # changed while copied: the next sample
            continue
        cpu = sum(r.workload.total_requests().get(CPU, 0) for r in running) / 1000
        writer = cluster.writer
        samples.append([time.monotonic(), len(cluster.pending), len(running), cpu,
                        writer.outstanding() if writer is not None else 0])  # fmt: skip


def view_timeline(
    samples: list[list[float]], t0: float, nominal_cpu: float, step: float
) -> list[dict[str, float]]:
    """The operator's :func:`sample_view` samples averaged per ``step`` seconds from ``t0``:
    its admitted CPU in percent of the nominal quota (what it believes it uses, beside the
    recorder's usage), its pending workloads and its outstanding writes."""
    bins: dict[int, list[list[float]]] = {}
    for t, *rest in samples:
        if t >= t0:
            bins.setdefault(int((t - t0) // step), []).append(rest)
    out = []
    for b, rows in sorted(bins.items()):
        n = len(rows)
        out.append({
            "t": round(b * step, 1),
            "view_usage_percent": round(100 * sum(r[2] for r in rows) / n / nominal_cpu, 1),
            "pending": round(sum(r[0] for r in rows) / n),
            "writes_outstanding": round(sum(r[3] for r in rows) / n),
        })  # fmt: skip
    return out


def accounted_usage(
    samples: list[list[float]], start: float, end: float, nominal_cpu: float
) -> float | None:
    """Average usage in the operator's own accounting, Kueue's definition of usage (its
    recorder integrates the CPU its controller reports in each ClusterQueue's
    ``status.flavorsUsage``, which counts an admission from the moment the controller assumes
    it until the workload finishes): each :func:`sample_view` sample's admitted CPU holds
    until the next, integrated over [``start``, ``end``] (monotonic), over the window and the
    nominal quota, in percent. None without samples in the window."""
    inside = [(t, cpu) for t, _, _, cpu, _ in samples if start <= t <= end]
    if not inside or end <= start:
        return None
    area = 0.0
    for (t, cpu), (t_next, _) in zip(inside, [*inside[1:], (end, 0.0)], strict=True):
        area += cpu * (t_next - t)
    return round(100 * area / ((end - start) * nominal_cpu), 2)


class OperatorProcess:
    """The parent's end of :func:`operator_child`."""

    def __init__(self, kubeconfig: Path, qps: float, burst: int, plain: bool,
                 workdir: Path) -> None:  # fmt: skip
        self.stats_path = workdir / "operator-stats.json"
        cmd = [sys.executable, __file__, "--operator-child", str(kubeconfig),
               "--qps", str(qps), "--burst", str(burst), "--stats", str(self.stats_path),
               *(["--plain"] if plain else [])]  # fmt: skip
        self.log = (workdir / "operator.log").open("w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)  # fmt: skip

    def wait_ready(self, timeout: float) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if not box or box[0].strip() != "ready":
            self.proc.kill()
            raise RuntimeError(f"the operator process did not reconcile within {timeout} s")

    def start(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("start\n")
        self.proc.stdin.flush()

    def stop(self, keys: list[str], timeout: float = 60.0) -> dict[str, Any]:
        """Stop it (sending the Jobs to sample) and read its statistics, with its whole CPU
        time from ``/proc`` (``operator_proc_cpu_s``, start-up included) just before."""
        assert self.proc.stdin is not None
        cpu = proc_cpu_s(self.proc.pid)
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write(json.dumps(keys) + "\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        if not self.stats_path.exists():
            log = self.stats_path.with_name("operator.log").read_text()[-2000:]
            raise RuntimeError(f"the operator process wrote no statistics: {log}")
        return {**json.loads(self.stats_path.read_text()), "operator_proc_cpu_s": cpu}


class TimedKubelet:
    """The harness's fake kubelet, watching pods instead of listing them: a bound pod is
    marked Running and, its running time (label) later, Succeeded; a bound pod being deleted
    is removed at once."""

    def __init__(
        self, kubelet: Any, workers: int = 16, forward: queue.Queue[Any] | None = None
    ) -> None:
        from fleetshare.operator.kube import PODS
        from fleetshare.operator.watch import Watcher

        self.kubelet = kubelet
        self.kube = kubelet.kube
        self.forward = forward
        """Where the pod watch's messages are passed on (the recorder: one pod watch for both,
        so the process decodes each pod event once)."""
        self.inbox: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.stop_event = threading.Event()
        self.watcher = Watcher(self.kube, PODS, self.inbox, self.stop_event)
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="kubelet")
        self.seen: set[tuple[str, str]] = set()
        self.started: set[tuple[str, str]] = set()
        """Pods seen bound (and marked Running)."""
        self.ran: dict[str, list[float]] = {}
        """Per Job (``ns/name``): when its last pod was first seen, seen bound, told to
        succeed, and its Succeeded status written (monotonic)."""
        self.unschedulable: set[tuple[str, str]] = set()
        """Pods kube-scheduler once found no room for (``PodScheduled`` False)."""
        self.due: list[tuple[float, str, str, dict[str, Any]]] = []
        self.thread = threading.Thread(target=self._run, name="timed-kubelet", daemon=True)

    def start(self) -> None:
        self.watcher.start()
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        from fleetshare.traces.kueue_generator import RUNNING_LABEL

        while not self.stop_event.is_set():
            wait = 0.05
            now = time.monotonic()
            while self.due and self.due[0][0] <= now:
                _, _, _, pod = heapq.heappop(self.due)
                times = self.ran.get(_job_of(pod), [0.0, 0.0])
                times.append(now)
                self.pool.submit(self._succeed, pod, times)
            if self.due:
                wait = min(wait, self.due[0][0] - now)
            try:
                message = self.inbox.get(timeout=max(0.001, wait))
            except queue.Empty:
                continue
            if self.forward is not None:
                self.forward.put(message)
            what, _, payload = message
            pods = payload[1] if what == "sync" else [payload[1]]
            if what == "event" and payload[0] == "DELETED":
                continue
            for pod in pods:
                meta, spec = pod["metadata"], pod.get("spec") or {}
                status = pod.get("status") or {}
                key = (meta["namespace"], meta["name"])
                if key not in self.seen:  # a new pod of the Job: its times start again
                    self.seen.add(key)
                    self.ran[_job_of(pod)] = [time.monotonic()]
                if not spec.get("nodeName"):
                    if any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                           for c in status.get("conditions") or ()):  # fmt: skip
                        self.unschedulable.add(key)
                    continue
                if meta.get("deletionTimestamp"):
                    self.pool.submit(self._delete, key)
                elif status.get("phase") == "Pending" and key not in self.started:
                    self.started.add(key)
                    self.ran[_job_of(pod)].append(time.monotonic())
                    self.pool.submit(self.kubelet._set_phase, pod, "Running")
                    ms = float((meta.get("labels") or {}).get(RUNNING_LABEL, 0))
                    heapq.heappush(self.due, (time.monotonic() + ms / 1000, *key, pod))

    def _succeed(self, pod: dict[str, Any], times: list[float]) -> None:
        self.kubelet._set_phase(pod, "Succeeded")
        times.append(time.monotonic())  # the status write answered

    def _delete(self, key: tuple[str, str]) -> None:
        from fleetshare.operator.kube import PODS, KubeError

        with contextlib.suppress(KubeError):
            self.kube.delete(PODS, key[1], key[0], gracePeriodSeconds=0)


def _job_of(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta['namespace']}/{(meta.get('labels') or {}).get('job-name', '')}"


def hops(
    spans: Mapping[str, list[list[float | None]]], ran: Mapping[str, list[float]]
) -> dict[str, float | None]:
    """Mean seconds, over Jobs admitted once and finished, from the admission to the pod
    created (the Job controller), from the pod created to it bound (kube-scheduler), both
    together, from the pod told to succeed to the Job's release, and of that the fake
    kubelet's status write (told to answered; all on one clock, as the watches see them).
    ``ran``: per Job, its pod first seen, seen bound, told to succeed, and (when known) its
    Succeeded status written."""
    created, bound, release, written = [], [], [], []
    for key, times in ran.items():
        span = spans.get(key) or []
        if len(span) != 1 or span[0][0] is None or span[0][1] is None or len(times) < 3:
            continue
        created.append(times[0] - span[0][0])
        bound.append(times[1] - times[0])
        release.append(span[0][1] - times[2])
        if len(times) > 3:
            written.append(times[3] - times[2])
    total = [a + b for a, b in zip(created, bound, strict=True)]
    return {
        "admitted_to_pod_created_s": _mean(created),
        "pod_created_to_bound_s": _mean(bound),
        "admitted_to_pod_bound_s": _mean(total),
        "pod_done_to_released_s": _mean(release),
        "kubelet_status_write_s": _mean(written),
    }


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


@dataclass
class Recorder:
    """Watches the Jobs and their pods: when each Job was admitted and released (see the
    module docstring)."""

    kube: Any
    t0: float = 0.0
    created: dict[str, float] = field(default_factory=dict)
    spans: dict[str, list[list[float | None]]] = field(default_factory=dict)
    phase: dict[str, str] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    last_finish: float = 0.0
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Per Job (``ns/name``), its pods by name."""

    def __post_init__(self) -> None:
        from fleetshare.operator.kube import JOBS
        from fleetshare.operator.watch import Watcher

        self.inbox: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.watchers = [Watcher(self.kube, JOBS, self.inbox, self.stop_event)]
        """The Jobs' watch; the pods' messages come from the kubelet's (``inbox``)."""
        self.thread = threading.Thread(target=self._run, name="recorder", daemon=True)

    def start(self) -> None:
        for watcher in self.watchers:
            watcher.start()
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)

    def mark_created(self, key: str) -> None:
        with self.lock:
            self.created.setdefault(key, time.monotonic() - self.t0)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                what, kind, payload = self.inbox.get(timeout=0.2)
            except queue.Empty:
                continue
            now = time.monotonic() - self.t0
            objects = payload[1] if what == "sync" else [payload[1]]
            deleted = what == "event" and payload[0] == "DELETED"
            for obj in objects:
                meta = obj["metadata"]
                if kind == "Pod":
                    key = _job_of(obj)
                    pods = self.pods.setdefault(key, {})
                    if deleted:
                        pods.pop(meta["name"], None)
                    else:
                        pods[meta["name"]] = obj
                else:
                    key = f"{meta['namespace']}/{meta['name']}"
                    self.jobs[key] = obj
                self.observe(key, now, gone=deleted and kind != "Pod")

    def observe(self, key: str, now: float, gone: bool = False) -> None:
        """Job ``key``'s phase by the operator's rule, from the Job and its pods."""
        from fleetshare.operator.kinds import JOB
        from fleetshare.operator.objects import job_phase

        job = self.jobs.get(key)
        if job is None or key in self.finished:
            return
        pods = list(self.pods.get(key, {}).values())
        new = "finished" if gone else job_phase(job, JOB, pods)
        old = self.phase.get(key, "pending")
        if new == old:
            return
        self.phase[key] = new
        spans = self.spans.setdefault(key, [])
        if new == "admitted":
            spans.append([now, None])
        elif old == "admitted" and spans:
            spans[-1][1] = now
        if new == "finished":
            self.finished.add(key)
            self.last_finish = max(self.last_finish, now)


def stamped_jobs(
    kube: Any, classes: Mapping[str, tuple[str, float, float]], wait: float = 60.0
) -> list[Stamped]:
    """The Jobs as :class:`Stamped` records, by one LIST once every admitted Job has its
    ``completionTime`` (or after ``wait`` seconds: the Job controller completes them after
    the operator released them)."""
    from fleetshare.operator.kube import JOBS
    from fleetshare.operator.objects import last_admission

    deadline = time.monotonic() + wait
    while True:
        items, _ = kube.list(JOBS)
        done = all((j.get("status") or {}).get("completionTime") for j in items
                   if last_admission(j) is not None)  # fmt: skip
        if done or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    out = []
    for job in items:
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if key not in classes:
            continue
        cls, cpu, runtime = classes[key]
        admitted = last_admission(job)  # an evicted Job that completed: the one it ended
        created = epoch(meta.get("creationTimestamp"))
        assert created is not None
        out.append(Stamped(cls, cpu, runtime, created,
                           None if admitted is None else admitted.at,
                           epoch((job.get("status") or {}).get("completionTime"))))  # fmt: skip
    return out


# -- the run ---------------------------------------------------------------------------------


def run(
    scale: str,
    qps: float,
    burst: int,
    creators: int,
    timeout: float,
    plain: bool = False,
    in_process: bool = False,
) -> dict[str, Any]:
    """Start the control plane, apply the scenario, measure (see the module docstring)."""
    from tests.kube_harness import ControlPlane, Harness, apply_policy, bin_dir

    from fleetshare.model.resources import CPU
    from fleetshare.operator.controller import install_crds
    from fleetshare.operator.kube import JOBS, KubeError
    from fleetshare.traces.kueue_generator import CLASS_LABEL
    from fleetshare.traces.kueue_generator import load as load_kueue

    trace = load_kueue(**shape_of(scale))
    jobs = arrivals(trace)
    classes = {
        w.name: (w.labels[CLASS_LABEL], w.total_requests()[CPU] / 1000, w.duration or 0.0)
        for w in trace.workloads
    }
    bins = bin_dir()
    if bins is None:
        raise SystemExit("kube binaries not built: run `make kube-bins` (tools/kube/build.sh)")
    workdir = Path(tempfile.mkdtemp(prefix="fleetshare-kueue-perf-"))
    plane = ControlPlane(bins, workdir, extra_args=FAST_CLIENTS)
    load_before = [round(x, 2) for x in os.getloadavg()]
    t_start = time.monotonic()
    child: OperatorProcess | None = None
    try:
        plane.start()
        harness = Harness(plane)
        started_s = time.monotonic() - t_start
        install_crds(harness.kube)
        apply_policy(harness, trace.load_policy())
        for ns in sorted({a.namespace for a in jobs}):
            harness.ensure_namespace(ns)
        for node in trace.nodes:
            harness.add_node(node.name, {"cpu": str(node.allocatable[CPU] // 1000),
                                         "memory": "1Ti", "pods": "10000"})  # fmt: skip
        recorder = Recorder(plane.client())
        kubelet = TimedKubelet(harness.kubelet, forward=recorder.inbox)
        kubelet.start()
        if in_process:
            operator, op_kube = make_operator(None, qps, burst, plain, client=plane.client)
            meter = OperatorMeter(operator, op_kube)
            stop = threading.Event()
            op_thread = threading.Thread(target=operator.run, args=(stop,), name="operator",
                                         daemon=True)  # fmt: skip
            op_thread.start()
            if not operator.ready.wait(120):
                raise RuntimeError("the operator did not reconcile within 120 s")
            meter.ready()
        else:
            child = OperatorProcess(plane.kubeconfig, qps, burst, plain, workdir)
            child.wait_ready(120)
        recorder.start()
        create_kube = plane.client()
        errors: list[str] = []

        def create(a: Arrival) -> None:
            delay = a.at - (time.monotonic() - recorder.t0)
            if delay > 0:
                time.sleep(delay)
            try:
                create_kube.create(JOBS, a.body, a.namespace)
            except KubeError as exc:
                errors.append(f"{a.namespace}/{a.name}: {exc}")
                return
            recorder.mark_created(f"{a.namespace}/{a.name}")

        if child is not None:
            child.start()
        else:
            meter.start()
        recorder.t0 = time.monotonic()
        with ThreadPoolExecutor(creators, thread_name_prefix="creator") as pool:
            for a in jobs:  # in arrival order: each thread sleeps until its Job is due
                pool.submit(create, a)
            created_s = None
            deadline = recorder.t0 + timeout
            while time.monotonic() < deadline and len(recorder.finished) < len(jobs):
                time.sleep(0.5)
                if created_s is None and len(recorder.created) + len(errors) >= len(jobs):
                    created_s = time.monotonic() - recorder.t0
        done = len(recorder.finished)
        keys = unfinished_keys(jobs, recorder.finished)
        samples: list[list[float]] = []
        if child is not None:
            stats = child.stop(keys)
            views = stats.pop("views")
            samples = stats.pop("view_samples")
        else:
            views = view_of(operator, keys)
            stop.set()
            op_thread.join(timeout=15)
            stats = meter.stats()
        unfinished = unfinished_sample(harness.kube, keys, views)
        stamped = stamped_jobs(harness.kube, classes)
        recorder.stop()
        kubelet.stop()
        with recorder.lock:
            observed = observed_of(recorder.created, recorder.spans, classes)
        nominal = float(trace.facts["nominal_cpu"])
        step = 10.0 if scale == "full" else 5.0  # the timelines' interval
        measures = kueue_measures(observed, nominal)
        ran = {k: [t - recorder.t0 for t in v] for k, v in kubelet.ran.items()}
        latency = hops(recorder.spans, ran)
        first = min(recorder.created.values(), default=0.0)
        admissions = sum(len(v) for v in recorder.spans.values())
        job_writes = sum(stats["operator_job_writes"].values())
        return {
            "scale": scale,
            "scenario": {
                **shape_of(scale),
                "workloads": len(jobs),
                "nodes": len(trace.nodes),
                "nominal_cpu": trace.facts["nominal_cpu"],
            },
            "operator_client": {"qps": qps, "burst": burst} if qps > 0 else "unthrottled",
            "operator_view": "plain (every object read at every reconcile)"
            if plain
            else "incremental",
            "creators": creators,
            "control_plane_start_s": round(started_s, 1),
            "finished": done,
            "create_errors": len(errors),
            "create_error_sample": errors[:3],
            "all_created_s": None if created_s is None else round(created_s, 1),
            "wall_s": round(recorder.last_finish - first, 1) if done == len(jobs) else None,
            "timed_out": done < len(jobs),
            "unfinished_sample": unfinished,
            "operator_process": "in process (a thread of the benchmark's)"
            if in_process
            else "a process of its own",
            **{k: v for k, v in stats.items() if k not in ("event_requests", "events_combined")},
            "admissions": admissions,
            "job_writes_per_admission": round(job_writes / max(admissions, 1), 3),
            "event_requests": stats["event_requests"],
            "events_combined": stats["events_combined"],
            "load_average_before": load_before,
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "kueue": measures,
            "server_timestamps": server_measures(stamped, float(trace.facts["nominal_cpu"])),
            "pipeline_latency": latency,
            "usage_timeline": usage_timeline(observed, nominal, step),
            "operator_view_timeline": view_timeline(samples, recorder.t0, nominal, step),
            "accounted_usage_percent": accounted_usage(
                samples, recorder.t0 + first, recorder.t0 + recorder.last_finish, nominal
            ),
            "pods_found_unschedulable": len(kubelet.unschedulable),
        }
    finally:
        if child is not None and child.proc.poll() is None:
            child.proc.kill()
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", action="append",
                        help="scenario size: full, tenth or CxQ (C cohorts x Q queues; "
                        "repeatable; default: full)")  # fmt: skip
    parser.add_argument(
        "--qps",
        type=float,
        action="append",
        help="the operator's client limit (repeatable; 0: unthrottled; default: 50 and 0)",
    )
    parser.add_argument("--burst", type=int, default=100, help="the operator client's burst")
    parser.add_argument("--creators", type=int, default=16, help="creating threads")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument(
        "--plain",
        action="store_true",
        help="the operator's plain view (every object read at every reconcile)",
    )
    parser.add_argument(
        "--operator-in-process",
        action="store_true",
        help="run the operator on a thread of the benchmark's process (default: a process "
        "of its own, as Kueue's runner runs its controller)",
    )
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--operator-child", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    parser.add_argument("--stats", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.operator_child:  # the operator's own process (OperatorProcess starts it)
        qps = args.qps[0] if args.qps else 50.0
        return operator_child(args.operator_child, qps, args.burst, args.plain, args.stats)
    if args.one:  # one run, in this process
        row = run(args.scale[0], args.qps[0], args.burst, args.creators, args.timeout,
                  args.plain, args.operator_in_process)  # fmt: skip
        print(json.dumps(row))
        return 0
    rows = []
    for scale in args.scale or ["full"]:
        for qps in args.qps if args.qps is not None else [50.0, 0.0]:
            row = run_sub(scale, qps, args)
            rows.append(row)
            if "error" in row:
                print(f"{scale} qps={qps:g}: {row['error'][-500:]}", file=sys.stderr)
                continue
            if args.out:  # after each run: a later one may not finish
                write(args.out, rows)
            k = row["kueue"]
            waits = ", ".join(f"{c} {v:g} s" for c, v in k["mean_time_to_admission_s"].items())
            print(
                f"{scale} qps={qps:g}: wall {row['wall_s']} s, {row['finished']:,} finished, "
                f"usage {k['average_usage_percent']:.1f}%, time to admission {waits}, "
                f"{row['operator_requests']:,} operator requests",
                file=sys.stderr,
            )
    if args.out:
        write(args.out, rows)
    else:
        print(json.dumps(report(rows), indent=2))
    return 0


def run_sub(scale: str, qps: float, args: argparse.Namespace) -> dict[str, Any]:
    """One run in a fresh process (nothing of one run's threads survives into the next)."""
    cmd = [sys.executable, __file__, "--one", "--scale", scale, "--qps", str(qps),
           "--burst", str(args.burst), "--creators", str(args.creators),
           "--timeout", str(args.timeout), *(["--plain"] if args.plain else []),
           *(["--operator-in-process"] if args.operator_in_process else [])]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 600)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"scale": scale, "qps": qps, "error": proc.stderr.strip()[-3000:]}
    return dict(json.loads(lines[-1]))


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "benchmark": "kueue_perf_api",
        "machine": machine(),
        "kueue_published": KUEUE_PUBLISHED,
        "target": TARGET,
        "results": rows,
    }


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report(rows), indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
