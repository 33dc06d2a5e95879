"""A small JSON client over the official ``kubernetes`` client's transport.

The official client handles kubeconfig files, in-cluster service-account credentials, TLS
and authentication; the operator talks to the API in plain JSON (dicts in, dicts out) through
it, because the manifest parser reads dicts and the typed models would only be converted
back. Errors are :class:`KubeError` with the HTTP status and the API's message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes import client as kube_client
from kubernetes import config as kube_config

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


class KubeError(Exception):
    """An API request failed: ``status`` (0: no answer), ``reason`` and the API's message."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}".strip(": "))
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class Resource:
    """A kind the operator reads: its API path and whether it is namespaced."""

    kind: str
    group_version: str  # "v1" (core) or "batch/v1", "fleetshare.io/v1alpha1"
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name)}"
        if sub:
            base += f"/{sub}"
        return base


NODES = Resource("Node", "v1", "nodes", False)
PODS = Resource("Pod", "v1", "pods", True)
EVENTS = Resource("Event", "v1", "events", True)
JOBS = Resource("Job", "batch/v1", "jobs", True)
PDBS = Resource("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets", True)
LEASES = Resource("Lease", "coordination.k8s.io/v1", "leases", True)
PRIORITY_CLASSES = Resource("PriorityClass", "scheduling.k8s.io/v1", "priorityclasses", False)
NAMESPACES = Resource("Namespace", "v1", "namespaces", False)
CRDS = Resource(
    "CustomResourceDefinition", "apiextensions.k8s.io/v1", "customresourcedefinitions", False
)


CONNECTIONS = 64
"""Connections a client keeps open to the API server. The operator sends from many threads at
once (admission writes, Events, watches); the client library's default (5 per core) makes it
close and re-open a TLS connection for every request beyond that, which costs both ends CPU."""


def load_client(kubeconfig: str | None = None) -> kube_client.ApiClient:
    """An API client from a kubeconfig file, else ``$KUBECONFIG`` / ``~/.kube/config``, else
    the pod's service account (in-cluster), keeping up to :data:`CONNECTIONS` connections."""
    config: Any = kube_config  # the client's config module is not typed
    settings = kube_client.Configuration()
    settings.connection_pool_maxsize = CONNECTIONS
    if kubeconfig:
        api: kube_client.ApiClient = config.new_client_from_config(
            config_file=kubeconfig, client_configuration=settings
        )
        return api
    try:
        api = config.new_client_from_config(client_configuration=settings)
    except config.ConfigException:
        config.load_incluster_config(client_configuration=settings)
        api = kube_client.ApiClient(configuration=settings)
    return api


class Kube:
    """JSON requests against the API server."""

    def __init__(self, api: kube_client.ApiClient) -> None:
        self.api = api

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | tuple[float, float] | None = 30.0,
        accept: str = "application/json",
    ) -> Any:
        raw = self._send(method, path, query=query, body=body, content_type=content_type,
                         timeout=timeout, accept=accept)  # fmt: skip
        data = raw.read()
        self._check(raw.status, raw.reason, data)
        return json.loads(data) if data else None

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
        timeout: float | tuple[float, float] | None,
        accept: str = "application/json",
    ) -> Any:
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        method, url, headers, body, post = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            return self.api.call_api(method, url, headers, body, post, _request_timeout=timeout)
        except kube_client.ApiException as exc:
            status, reason = int(exc.status or 0), str(exc.reason or "error")
            raise KubeError(status, reason, str(exc.body or "")) from exc
        except OSError as exc:
            raise KubeError(0, "unreachable", str(exc)) from exc
        except Exception as exc:  # urllib3 errors: the API server is not answering
            if type(exc).__module__.startswith("urllib3"):
                raise KubeError(0, "unreachable", str(exc)) from exc
            raise

    @staticmethod
    def _check(status: int, reason: str, data: bytes | None) -> None:
        if 200 <= status < 300:
            return
        message = ""
        if data:
            try:
                message = str(json.loads(data).get("message", ""))
            except (ValueError, AttributeError):
                message = data[:300].decode(errors="replace")
        raise KubeError(status, str(reason or ""), message)

    # -- verbs ---------------------------------------------------------------------------------

    def get(
        self, res: Resource, name: str, namespace: str | None = None, sub: str = ""
    ) -> dict[str, Any]:
        out: dict[str, Any] = self.request("GET", res.path(namespace, name, sub))
        return out

    def list(
        self, res: Resource, namespace: str | None = None, **query: Any
    ) -> tuple[list[dict[str, Any]], str]:
        """Every object (paged) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        cont: str | None = None
        while True:
            page = self.request(
                "GET", res.path(namespace), query={"limit": 500, "continue": cont, **query}
            )
            kind = res.kind
            for item in page.get("items") or ():
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", res.group_version)
                items.append(item)
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return items, str((page.get("metadata") or {}).get("resourceVersion", ""))

    def watch(
        self, res: Resource, resource_version: str, namespace: str | None = None,
        timeout_seconds: int = 60,
    ) -> Iterator[tuple[str, dict[str, Any]]]:  # fmt: skip
        """Events (type, object) from ``resource_version`` until the server ends the watch."""
        raw = self._send(
            "GET",
            res.path(namespace),
            query={
                "watch": "true",
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": timeout_seconds,
            },
            body=None,
            content_type=None,
            timeout=(10.0, timeout_seconds + 30.0),
        )
        response = raw.response
        if not 200 <= raw.status < 300:
            self._check(raw.status, raw.reason, response.data)
        buffer = b""
        try:
            for chunk in response.stream(amt=None, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        yield str(event.get("type")), event.get("object") or {}
        finally:
            response.release_conn()

    def served(self, res: Resource) -> bool:
        """Does the API server serve this kind (for a custom resource: is its CRD installed)?"""
        base = "/api/v1" if res.group_version == "v1" else f"/apis/{res.group_version}"
        try:
            doc = self.request("GET", base)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return any(r.get("name") == res.plural for r in (doc or {}).get("resources") or ())

    def create(self, res: Resource, body: Mapping[str, Any], namespace: str | None = None) -> Any:
        return self.request("POST", res.path(namespace), body=dict(body))

    def patch(
        self,
        res: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        sub: str = "",
        content_type: str = MERGE,
    ) -> dict[str, Any]:
        out: dict[str, Any] = self.request(
            "PATCH", res.path(namespace, name, sub), body=body, content_type=content_type
        )
        return out

    def replace(
        self, res: Resource, name: str, body: Mapping[str, Any], namespace: str | None = None,
        sub: str = "",
    ) -> dict[str, Any]:  # fmt: skip
        out: dict[str, Any] = self.request("PUT", res.path(namespace, name, sub), body=dict(body))
        return out

    def delete(self, res: Resource, name: str, namespace: str | None = None, **query: Any) -> Any:
        return self.request("DELETE", res.path(namespace, name), query=query)

    def evict(self, namespace: str, name: str, *, dry_run: bool = False) -> None:
        """Evict a pod through the Eviction API (PodDisruptionBudgets are respected: 429 when
        one forbids it); ``dry_run`` only asks whether the API server would."""
        self.request(
            "POST",
            PODS.path(namespace, name, "eviction"),
            query={"dryRun": "All"} if dry_run else None,
            body={
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
            },
        )
