"""A real Kubernetes control plane for the operator's tests: etcd, kube-apiserver,
kube-scheduler and kube-controller-manager (its Job, CronJob, disruption, Deployment,
ReplicaSet and StatefulSet controllers), built from the Go module proxy by
``tools/kube/build.sh`` (``make kube-bins``), started once per test session on loopback with
random ports and stopped by PID at the end.

There is no kubelet: nodes are Node objects the tests create, and :class:`FakeKubelet` (a
thread) plays the kubelets' part for pods: a pod bound to a node is marked Running, a pod told
to finish is marked Succeeded, and a bound pod being deleted is removed at once (a kubelet
confirms a graceful deletion; without one a pod would stay Terminating). A node the tests mark
NotReady also gets the ``node.kubernetes.io/not-ready:NoSchedule`` taint, as the node-lifecycle
controller (not run) would give it. The fake kubelet also registers a Ready Node for each
launched NodeClaim, as the instance's kubelet would (the cloud is the simulated one). Of
kube-controller-manager, the Job, CronJob, disruption (PodDisruptionBudget status),
Deployment, ReplicaSet and StatefulSet controllers run (no HPA controller).

Binaries are looked up in ``$FLEETSHARE_KUBE_BIN`` or the cache directory ``build.sh`` prints.
When they are missing the tests are skipped with the reason, unless
``FLEETSHARE_KUBE_REQUIRED=1`` (``make test`` sets it), which makes that an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetshare.operator.kube import JOBS, NODES, PODS, Kube, KubeError, Resource, load_client
from fleetshare.operator.objects import ADMISSION

G5 = {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "1"}
OPERATOR_USER = "fleetshare-operator"
NAMESPACES = Resource("Namespace", "v1", "namespaces", False)
NOT_READY = "node.kubernetes.io/not-ready"

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "tools" / "kube" / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
TEST_ARGS = {"kube-apiserver": ["--watch-cache=false"]}
"""The tests' API server reads etcd directly. With its watch cache, a list is consistent
only once the cache has caught up with etcd's latest revision, and a list of a kind no write
touched since (nodes, after a JobSet was patched) waits for etcd's progress notification,
which the API server asks for every 100 ms: most of the lists the tests make (a replay
feeding the operator, a poll) took 10-100 ms instead of 1-3 ms. The lists and watches answer
the same (the cache is a server-side speed-up; a benchmark keeps it)."""


def bin_dir() -> Path | None:
    """Where the binaries are (None: not built)."""
    given = os.environ.get("FLEETSHARE_KUBE_BIN")
    if given:
        return Path(given)
    try:
        out = subprocess.run(
            ["bash", str(BUILD), "--where"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(out)
    return path if all((path / b).is_file() for b in BINARIES) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ControlPlane:
    """The running processes, a kubeconfig and an admin API client."""

    def __init__(
        self, bins: Path, workdir: Path, extra_args: dict[str, list[str]] | None = None
    ) -> None:
        self.bins = bins
        self.dir = workdir
        self.extra_args = extra_args or {}
        """More flags per binary (a benchmark raises the clients' rate limits)."""
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.token = uuid.uuid4().hex
        self.operator_token = uuid.uuid4().hex
        """A user with no rights but those a test binds to it (the chart's RBAC)."""
        self.kubeconfig = workdir / "kubeconfig"
        self.port = 0

    # -- start and stop ---------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen(
            [str(self.bins / name), *args, *self.extra_args.get(name, ())],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
        )
        self.procs.append((name, proc))
        return proc

    def start(self) -> None:
        d = self.dir
        etcd_port = _free_port()
        self._spawn(
            "etcd",
            [
                f"--data-dir={d / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls=http://127.0.0.1:0",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        subprocess.run(
            ["openssl", "genrsa", "-out", str(d / "sa.key"), "2048"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            ["openssl", "rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub")],
            check=True,
            capture_output=True,
        )
        (d / "tokens.csv").write_text(
            f"{self.token},admin,admin,system:masters\n"
            f"{self.operator_token},{OPERATOR_USER},{OPERATOR_USER}\n"
        )
        self.port = _free_port()
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={d / 'certs'}",
                f"--token-auth-file={d / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--service-account-issuer=https://fleetshare.test",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--disable-admission-plugins=ServiceAccount",
                "--allow-privileged=true",
                "--profiling=false",
                "--endpoint-reconciler-type=none",
            ],
        )
        self._wait_ready()
        self._write_kubeconfig()
        common = [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            "--profiling=false",
        ]
        self._spawn("kube-scheduler", common)
        self._spawn(
            "kube-controller-manager",
            [
                *common,
                "--controllers=job,cronjob,disruption,deployment,replicaset,statefulset",
                "--concurrent-job-syncs=5",
            ],
        )

    def _wait_ready(self, timeout: float = 60.0) -> None:
        import ssl

        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log(name)}")
            req = urllib.request.Request(
                f"https://127.0.0.1:{self.port}/readyz",
                headers={"Authorization": f"Bearer {self.token}"},
            )
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise RuntimeError(f"kube-apiserver not ready after {timeout:g} s ({last})")

    def _write_kubeconfig(self) -> None:
        ca = next((self.dir / "certs").glob("*.crt"))
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {
                        "server": f"https://127.0.0.1:{self.port}",
                        "certificate-authority": str(ca),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
            "current-context": "test",
        }
        self.kubeconfig.write_text(json.dumps(cfg))

    def log(self, name: str) -> str:
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        """Stop the processes, etcd last. kube-apiserver's graceful shutdown waits for the
        open watches (a test's operator threads may leave some) and, with etcd gone, for its
        storage: at the end of a session there is nothing to wait for, so it gets 2 s before
        it is killed (it used to take the full 10 s of the wait below)."""
        for group, grace in (([p for n, p in self.procs if n != "etcd"], 2.0),
                             ([p for n, p in self.procs if n == "etcd"], 10.0)):  # fmt: skip
            for proc in group:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            for proc in group:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    # -- clients ------------------------------------------------------------------------------

    def client(self, token: str | None = None) -> Kube:
        """An admin client, or one authenticated by ``token``."""
        if token is None:
            return Kube(load_client(str(self.kubeconfig)))
        cfg = json.loads(self.kubeconfig.read_text())
        cfg["users"][0]["user"]["token"] = token
        path = self.dir / f"kubeconfig-{token[:8]}"
        path.write_text(json.dumps(cfg))
        return Kube(load_client(str(path)))


def mark_ready(
    kube: Kube, name: str, ready: bool, allocatable: dict[str, str] | None = None
) -> None:
    """Set the node's Ready condition (and allocatable), with the not-ready taint the
    node-lifecycle controller (not run here) gives and takes."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ]
    }
    if allocatable is not None:
        status["allocatable"] = {"pods": "110", **allocatable}
        status["capacity"] = status["allocatable"]
    kube.patch(NODES, name, {"status": status}, sub="status",
                    content_type="application/strategic-merge-patch+json")  # fmt: skip
    # what the node-lifecycle controller (not run here) does to a NotReady node
    node = kube.get(NODES, name)
    taints = [t for t in node["spec"].get("taints") or () if t["key"] != NOT_READY]
    if not ready:
        taints.append({"key": NOT_READY, "effect": "NoSchedule"})
    if taints != (node["spec"].get("taints") or []):
        kube.patch(NODES, name, {"spec": {"taints": taints}})


class FakeKubelet:
    """Every node's kubelet, as far as pod phases go (see the module docstring)."""

    def __init__(self, kube: Kube, interval: float = 0.2) -> None:
        self.kube = kube
        self.interval = interval
        self._finish: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)
        self.errors: list[str] = []
        self.join_claims = True
        """Register a Node for every launched NodeClaim, as the instance's kubelet would."""
        self.never_join: set[str] = set()
        """Pools whose instances never register (a node that fails to boot)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def finish(self, namespace: str, name: str) -> None:
        """Mark pod ``name`` Succeeded once it runs (a job's pods: :meth:`finish_job`)."""
        with self._lock:
            self._finish.add((namespace, name))

    def finish_job(self, namespace: str, job: str) -> int:
        """Mark every live pod of Job ``job`` Succeeded; how many there were."""
        pods, _ = self.kube.list(PODS, namespace, labelSelector=f"job-name={job}")
        live = [p for p in pods if (p.get("status") or {}).get("phase") in ("Pending", "Running")]
        for pod in live:
            self.finish(namespace, pod["metadata"]["name"])
        return len(live)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception as exc:  # keep going: a test reads .errors when it fails
                self.errors.append(repr(exc))

    def tick(self) -> None:
        if self.join_claims:
            self._join_claims()
        pods, _ = self.kube.list(PODS)
        for pod in pods:
            meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
            key = (meta["namespace"], meta["name"])
            if meta.get("deletionTimestamp"):
                if spec.get("nodeName"):
                    with contextlib.suppress(KubeError):
                        self.kube.delete(PODS, meta["name"], meta["namespace"],
                                         gracePeriodSeconds=0)  # fmt: skip
                continue
            if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
                continue
            with self._lock:
                done = key in self._finish
            if status.get("phase") == "Pending" or done:
                self._set_phase(pod, "Succeeded" if done else "Running")
                if done:
                    with self._lock:
                        self._finish.discard(key)

    def _join_claims(self) -> None:
        """A launched NodeClaim's instance boots and its kubelet registers a Ready Node of
        the claim's name, labels, taints and allocatable, with the claim's provider id."""
        from fleetshare.operator.nodeclaims import NODE_CLAIMS, POOL

        try:
            claims, _ = self.kube.list(NODE_CLAIMS)
        except KubeError:
            return  # the CRD is not installed
        for claim in claims:
            status = claim.get("status") or {}
            meta = claim["metadata"]
            labels = meta.get("labels") or {}
            if not status.get("providerID") or labels.get(POOL) in self.never_join:
                continue
            if meta.get("deletionTimestamp"):
                continue
            body = {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": meta["name"],
                             "labels": {**labels, "kubernetes.io/hostname": meta["name"]}},
                "spec": {"providerID": status["providerID"],
                         "taints": (claim.get("spec") or {}).get("taints") or []},
            }  # fmt: skip
            try:
                self.kube.create(NODES, body)
            except KubeError as exc:
                if exc.status == 409:
                    continue  # registered already
                raise
            mark_ready(self.kube, meta["name"], True, status.get("allocatable") or {})

    def _set_phase(self, pod: dict[str, Any], phase: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = "True" if phase == "Running" else "False"
        state: dict[str, Any] = (
            {"running": {"startedAt": now}}
            if phase == "Running"
            else {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now,
                                 "finishedAt": now}}
        )  # fmt: skip
        containers = [
            {"name": c["name"], "ready": phase == "Running", "restartCount": 0,
             "image": c.get("image") or "none", "imageID": "", "state": state}
            for c in pod["spec"]["containers"]
        ]  # fmt: skip
        body = {
            "status": {
                "phase": phase,
                "startTime": now,
                "conditions": [
                    {"type": "Ready", "status": ready, "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
                ],
                "containerStatuses": containers,
            }
        }
        meta = pod["metadata"]
        with contextlib.suppress(KubeError):
            self.kube.patch(PODS, meta["name"], body, meta["namespace"], sub="status",
                            content_type="application/strategic-merge-patch+json")  # fmt: skip


class Harness:
    """What the ``kube`` fixture hands to tests."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.kube = plane.client()
        self.kubelet = FakeKubelet(plane.client())

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    def new_namespace(self, prefix: str) -> str:
        name = f"{prefix[:40]}-{uuid.uuid4().hex[:6]}".lower().replace("_", "-")
        self.ensure_namespace(name)
        return name

    def operator_client(
        self, cluster_rules: list[dict[str, Any]], lease_rules: list[dict[str, Any]], ns: str
    ) -> Kube:
        """A client of the user ``fleetshare-operator`` bound to ``cluster_rules`` (a
        ClusterRole) and ``lease_rules`` (a Role in ``ns``), as the Helm chart binds them."""
        rbac = "rbac.authorization.k8s.io/v1"
        role = Resource("ClusterRole", rbac, "clusterroles", False)
        binding = Resource("ClusterRoleBinding", rbac, "clusterrolebindings", False)
        ns_role = Resource("Role", rbac, "roles", True)
        ns_binding = Resource("RoleBinding", rbac, "rolebindings", True)
        subject = [{"kind": "User", "name": OPERATOR_USER, "apiGroup": rbac.split("/")[0]}]
        name = "fleetshare-test-operator"
        for res, body in ((role, {"rules": cluster_rules}),
                          (binding, {"roleRef": {"apiGroup": rbac.split("/")[0],
                                                 "kind": "ClusterRole", "name": name},
                                     "subjects": subject})):  # fmt: skip
            with contextlib.suppress(KubeError):
                self.kube.delete(res, name)
            self.kube.create(res, {"metadata": {"name": name}, **body})
        ref = {"apiGroup": rbac.split("/")[0], "kind": "Role", "name": name}
        for res, body in ((ns_role, {"rules": lease_rules}),
                          (ns_binding, {"roleRef": ref, "subjects": subject})):  # fmt: skip
            with contextlib.suppress(KubeError):
                self.kube.delete(res, name, ns)
            self.kube.create(res, {"metadata": {"name": name}, **body}, ns)
        return self.plane.client(self.plane.operator_token)

    def ensure_namespace(self, name: str) -> None:
        with contextlib.suppress(KubeError):
            self.kube.create(NAMESPACES, {"metadata": {"name": name}})

    def add_node(
        self,
        name: str,
        allocatable: dict[str, str],
        labels: dict[str, str] | None = None,
        *,
        ready: bool = True,
        taints: list[dict[str, str]] | None = None,
        owner: str = "",
    ) -> None:
        """A Node object (no kubelet behind it), Ready unless told."""
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "fleetshare-test": owner,
                           **(labels or {})},
            },
            "spec": {"taints": taints or []},
        }  # fmt: skip
        self.kube.create(NODES, body)
        self.set_node_ready(name, ready, allocatable=allocatable)

    def set_node_ready(
        self, name: str, ready: bool, allocatable: dict[str, str] | None = None
    ) -> None:
        mark_ready(self.kube, name, ready, allocatable)

    def delete_nodes(self, owner: str) -> None:
        nodes, _ = self.kube.list(NODES, labelSelector=f"fleetshare-test={owner}")
        for node in nodes:
            with contextlib.suppress(KubeError):
                self.kube.delete(NODES, node["metadata"]["name"])

    def delete_cluster_objects(self) -> None:
        """Teams, cluster policies, node pools, node claims and their nodes (cluster-scoped:
        one test's must not leak into the next)."""
        from fleetshare.operator.controller import CLUSTER_POLICIES, TEAMS
        from fleetshare.operator.nodeclaims import NODE_CLAIMS, NODE_POOLS, POOL

        for node in self.kube.list(NODES, labelSelector=POOL)[0]:  # nodes the claims brought
            with contextlib.suppress(KubeError):
                self.kube.delete(NODES, node["metadata"]["name"])
        for res in (TEAMS, CLUSTER_POLICIES, NODE_CLAIMS, NODE_POOLS):
            try:
                items, _ = self.kube.list(res)
            except KubeError:
                continue
            for item in items:
                with contextlib.suppress(KubeError):
                    self.kube.delete(res, item["metadata"]["name"])

    def job(self, namespace: str, name: str) -> dict[str, Any]:
        return self.kube.get(JOBS, name, namespace)

    def pods(self, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": selector} if selector else {}
        return self.kube.list(PODS, namespace, **query)[0]

    def events(self, namespace: str) -> list[dict[str, Any]]:
        from fleetshare.operator.kube import EVENTS

        return self.kube.list(EVENTS, namespace)[0]


def wait_for(what: str, check: Any, timeout: float = 30.0, interval: float = 0.1) -> Any:
    """Poll ``check()`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {value!r})")


@contextlib.contextmanager
def control_plane() -> Iterator[Harness]:
    """Start the control plane (skip or fail when the binaries are missing)."""
    bins = bin_dir()
    if bins is None:
        why = (
            "kube binaries not built: run `make kube-bins` (tools/kube/build.sh builds etcd, "
            "kube-apiserver, kube-scheduler and kube-controller-manager from the Go module proxy)"
        )
        if os.environ.get("FLEETSHARE_KUBE_REQUIRED") == "1":
            pytest.fail(why)
        pytest.skip(why)
    workdir = Path(tempfile.mkdtemp(prefix="fleetshare-kube-"))
    plane = ControlPlane(bins, workdir, TEST_ARGS)
    try:
        plane.start()
        harness = Harness(plane)
        harness.kubelet.start()
        try:
            yield harness
        finally:
            harness.kubelet.stop()
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)


class OperatorThread:
    """The operator in a thread of the test process (stopped cleanly by :meth:`stop`)."""

    def __init__(
        self, harness: Harness, namespaces: list[str], kube: Kube | None = None, **settings: Any
    ) -> None:
        from fleetshare.operator.controller import Operator, Settings

        self.kube = kube or harness.plane.client()
        settings.setdefault("leader_elect", False)
        settings.setdefault("resync_seconds", 2.0)
        self.operator = Operator(self.kube, Settings(namespaces=tuple(namespaces), **settings))
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="operator", daemon=True)

    def _run(self) -> None:
        try:
            self.operator.run(self._stop)
        except BaseException as exc:  # the test reads it
            self.error = exc

    def start(self) -> OperatorThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        if self.error is not None:
            raise self.error


def apply_policy(harness: Harness, policy: Any) -> None:
    """Create the ClusterPolicy and Teams of a :class:`Policy`."""
    from fleetshare.operator.crds import policy_objects

    for obj in policy_objects(policy):
        plural = "clusterpolicies" if obj["kind"] == "ClusterPolicy" else "teams"
        from fleetshare.operator.controller import CLUSTER_POLICIES, TEAMS

        harness.kube.create(CLUSTER_POLICIES if plural == "clusterpolicies" else TEAMS, obj)


def install_crds(harness: Harness) -> None:
    from fleetshare.operator.controller import install_crds as install

    install(harness.kube)


# -- manifests and checks the tests share -----------------------------------------------


def gpu_job(
    ns: str, name: str, team: str, pods: int, priority: str | None = None, gpus: int = 1
) -> dict[str, Any]:
    labels = {"fleetshare.io/team": team}
    if priority:
        labels["fleetshare.io/priority-class"] = priority
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "main", "image": "registry.example/train:1",
                        "resources": {"requests": {"cpu": "4", "memory": "16Gi"},
                                      "limits": {"nvidia.com/gpu": str(gpus)}},
                    }],
                }
            },
        },
    }  # fmt: skip


def admitted(kube: Harness, ns: str, name: str) -> bool:
    job = kube.job(ns, name)
    return not job["spec"].get("suspend") and ADMISSION in job["metadata"].get("annotations", {})


def running_pods(kube: Harness, ns: str, job: str) -> list[dict[str, Any]]:
    return [
        p for p in kube.pods(ns, f"job-name={job}")
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]  # fmt: skip
