"""The CLI's HTTP client for a ``fleetshare serve`` API (httpx).

Files the user names are read here, on the client, and sent in the request body.
"""

from __future__ import annotations

import json
import os
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from fleetshare.manifests.kinds.base import POD_GROUP_LABEL
from fleetshare.service.submission import is_manifest
from fleetshare.service.tls import client_context

SERVER_ENV = "FLEETSHARE_SERVER"
TOKEN_ENV = "FLEETSHARE_TOKEN"
CA_ENV = "FLEETSHARE_CA_CERT"
DEFAULT_SERVER = "http://127.0.0.1:8080"


class ClientError(Exception):
    """A request that failed; the message is one line for people."""


class Client:
    """Calls to one server with one token."""

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        ca_cert: Path | None = None,
    ) -> None:
        """``ca_cert``: the CA (PEM) an https server's certificate is checked against instead
        of the system's; TlsError when it cannot be read."""
        self.server = (server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER).rstrip("/")
        self.token = token or os.environ.get(TOKEN_ENV)
        ca = ca_cert or (Path(os.environ[CA_ENV]) if os.environ.get(CA_ENV) else None)
        verify: ssl.SSLContext | bool = client_context(ca) if ca is not None else True
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.Client(
            base_url=self.server, headers=headers, timeout=timeout, verify=verify
        )

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.exchange(method, path, **kwargs)[1]

    def exchange(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        """The status and the body (JSON decoded) of a request that succeeded."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            hint = (
                " (is --ca-cert the CA that signed it?)" if "CERTIFICATE_VERIFY" in str(exc) else ""
            )
            raise ClientError(f"{self.server}: {exc}{hint}") from None
        if response.status_code >= 400:
            raise ClientError(f"{response.status_code}: {_detail(response)}")
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.status_code, response.json()
        return response.status_code, response.text

    # -- the API ---------------------------------------------------------------------------

    def teams(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/api/v1/teams")
        return result

    def team(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/api/v1/teams/{_quote(name)}")
        return result

    def set_team(self, name: str, team: Any) -> tuple[int, dict[str, Any]]:
        """Add (201) or replace (200) one team of the policy; the status and the version."""
        status, result = self.exchange("PUT", f"/api/v1/teams/{_quote(name)}", json=team)
        return status, result

    def remove_team(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("DELETE", f"/api/v1/teams/{_quote(name)}")
        return result

    def submit(self, body: Any) -> dict[str, Any]:
        """A native spec, a Kubernetes object, or the objects of one pod group (a list)."""
        result: dict[str, Any] = self.request("POST", "/api/v1/workloads", json=body)
        return result

    def workloads(
        self, team: str | None = None, state: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Every matching workload (following pages), up to ``limit``."""
        out: list[dict[str, Any]] = []
        after = 0
        while True:
            params: dict[str, Any] = {"after": after, "limit": 500}
            if team:
                params["team"] = team
            if state:
                params["state"] = state
            page = self.request("GET", "/api/v1/workloads", params=params)
            out.extend(page["items"])
            if page["next_after"] is None or (limit is not None and len(out) >= limit):
                return out[:limit] if limit is not None else out
            after = page["next_after"]

    def workload(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/api/v1/workloads/{_quote(name)}")
        return result

    def cancel(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("DELETE", f"/api/v1/workloads/{_quote(name)}")
        return result

    def explain(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/api/v1/workloads/{_quote(name)}/explain")
        return result

    def nodes(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/api/v1/nodes")
        return result

    def node_action(self, name: str, action: str) -> dict[str, Any]:
        """``cordon``, ``uncordon`` or ``drain`` a node (admin)."""
        result: dict[str, Any] = self.request("POST", f"/api/v1/nodes/{_quote(name)}/{action}")
        return result

    def nodepools(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/api/v1/nodepools")
        return result

    def set_nodepools(self, pools: list[Any]) -> dict[str, Any]:
        """Replace every node pool (admin)."""
        result: dict[str, Any] = self.request("PUT", "/api/v1/nodepools", json={"pools": pools})
        return result

    def events(self, after: int = 0, limit: int = 500) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "GET", "/api/v1/events", params={"after": after, "limit": limit}
        )
        return result

    def follow_events(
        self, after: int = 0, retry: float = 2.0, stop: Callable[[], bool] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Events after ``after`` from the server-sent event stream, for ever: a dropped
        connection is opened again after ``retry`` seconds, resuming after the last event
        seen (``Last-Event-ID``). A refused request (401, 403) ends it with ClientError;
        ``stop()`` true ends it quietly between messages."""
        last = after
        while stop is None or not stop():
            try:
                with self._http.stream(
                    "GET",
                    "/api/v1/events/stream",
                    headers={"Last-Event-ID": str(last), "Accept": "text/event-stream"},
                    timeout=httpx.Timeout(self._http.timeout.connect, read=60.0),
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise ClientError(f"{response.status_code}: {_detail(response)}")
                    for event_id, data in sse_messages(response.iter_lines()):
                        if event_id is not None and event_id.isdigit():
                            last = int(event_id)
                        if data:
                            yield json.loads(data)
                        if stop is not None and stop():
                            return
            except httpx.HTTPError:
                pass
            time.sleep(retry)

    def services(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/api/v1/services")
        return result

    def service(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/api/v1/services/{_quote(name)}")
        return result

    def apply_service(self, body: Any) -> tuple[dict[str, Any], bool]:
        """Register the service, or change the one of that name in place; the service and
        whether it was created."""
        name = body.get("name", "") if isinstance(body, dict) else ""
        status, result = self.exchange("PUT", f"/api/v1/services/{_quote(str(name))}", json=body)
        return result, status == 201

    def delete_service(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("DELETE", f"/api/v1/services/{_quote(name)}")
        return result

    def whoami(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/api/v1/whoami")
        return result

    def policy(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/api/v1/policy")
        return result

    def set_policy(self, policy: Any, fmt: str = "fleetshare") -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "PUT", "/api/v1/policy", json={"format": fmt, "policy": policy}
        )
        return result


def sse_messages(lines: Iterable[str]) -> Iterator[tuple[str | None, str]]:
    """(id, data) of each server-sent event message (comments and ``retry:`` skipped)."""
    event_id: str | None = None
    data: list[str] = []
    for line in lines:
        if not line:
            if data or event_id is not None:
                yield event_id, "\n".join(data)
            event_id, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "id":
            event_id = value
        elif field == "data":
            data.append(value)


def split_submissions(docs: list[Any]) -> list[Any]:
    """The request bodies of a file's documents, one per workload: a native spec each (also
    from a list of specs or ``{workloads: [...]}``); a Kubernetes object each (the items of a
    ``kind: List`` too), except the pods of one pod group (same namespace and
    ``kueue.x-k8s.io/pod-group-name``), which go together as a list. ValueError names a
    document that is neither."""
    out: list[Any] = []
    groups: dict[tuple[str, str], list[Any]] = {}

    def add(obj: dict[str, Any]) -> None:
        metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        assert isinstance(metadata, dict)
        labels = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
        assert isinstance(labels, dict)
        group = labels.get(POD_GROUP_LABEL) if obj.get("kind") == "Pod" else None
        if not isinstance(group, str):
            out.append(obj)
            return
        key = (str(metadata.get("namespace") or "default"), group)
        if key not in groups:
            groups[key] = []
            out.append(groups[key])
        groups[key].append(obj)

    for i, doc in enumerate(docs):
        items = doc if isinstance(doc, list) else [doc]
        if isinstance(doc, dict) and isinstance(doc.get("workloads"), list):
            items = doc["workloads"]
        for item in items:
            if not isinstance(item, dict):
                raise ValueError(
                    f"document {i + 1}: give workload specs (mappings) or Kubernetes objects"
                )
            if is_manifest(item) and item.get("kind") == "List":
                for member in item.get("items") or []:
                    if isinstance(member, dict):
                        add(member)
                    else:
                        out.append(member)  # the server names what is wrong with it
            elif is_manifest(item):
                add(item)
            else:
                out.append(item)
    if not out:
        raise ValueError("holds no workload")
    return out


def pools_of(doc: Any) -> list[Any]:
    """The node pools of a file's document: ``{pools: [...]}``, a list of pools, or one pool
    (a mapping with a ``name``). ValueError says what it is instead."""
    if isinstance(doc, dict) and isinstance(doc.get("pools"), list):
        return list(doc["pools"])
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict) and "name" in doc:
        return [doc]
    raise ValueError("give {pools: [...]}, a list of node pools, or one node pool")


def _quote(name: str) -> str:
    return quote(name, safe="")


def _detail(response: httpx.Response) -> str:
    """The server's error in one line."""
    try:
        detail = response.json().get("detail")
    except ValueError:
        return response.text.strip().splitlines()[0][:300] if response.text.strip() else "error"
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(p) for p in item.get("loc", []) if p != "body")
                parts.append(f"{loc}: {item.get('msg')}" if loc else str(item.get("msg")))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)
