"""The submission hot path past the framework (``service/shortcut.py``): what it takes, what it
hands to the app, and that the answers are the route's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from fleetshare.service.api import create_app
from fleetshare.service.auth import Principal, create_token
from fleetshare.service.config import load_config
from fleetshare.service.plane import ControlPlane
from fleetshare.service.shortcut import Shortcut
from fleetshare.service.store import Store
from tests.service_helpers import job

ADMIN = Principal(0, "admin")

# -- what it takes (a fake app underneath) ------------------------------------------------------


def _call(
    shortcut: Shortcut, scope: dict[str, Any], body: bytes
) -> tuple[list[Message], list[bytes]]:
    """The messages sent back, and the body the app underneath read (if it was called)."""
    sent: list[Message] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(shortcut(scope, receive, send))
    return sent, shortcut.app.bodies  # type: ignore[attr-defined]


class _App:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        self.bodies.append(message["body"])
        await Response(b"app", 200)(scope, receive, send)


def _scope(**change: Any) -> dict[str, Any]:
    headers = {
        b"authorization": b"Bearer good",
        b"content-type": b"application/json",
        b"content-length": b"2",
    }
    headers.update(change.pop("headers", {}))
    scope = {"type": "http", "method": "POST", "path": "/w", "query_string": b""}
    return {**scope, **change, "headers": [(k, v) for k, v in headers.items() if v is not None]}


def _shortcut(answer: Response | None = None) -> tuple[Shortcut, list[bytes]]:
    taken: list[bytes] = []

    async def handler(who: Principal, body: bytes, content_type: str) -> Response | None:
        assert who is ADMIN and content_type == "application/json"
        taken.append(body)
        return answer

    async def principal(header: str | None) -> Principal | None:
        return ADMIN if header == "Bearer good" else None

    shortcut = Shortcut(_App(), path="/w", principal=principal, handler=handler, max_bytes=10)
    return shortcut, taken


def test_the_shortcut_takes_a_small_json_post_with_a_cached_token() -> None:
    shortcut, taken = _shortcut(Response(b"taken", 201))
    sent, app_bodies = _call(shortcut, _scope(), b"{}")
    assert taken == [b"{}"] and app_bodies == []
    assert sent[0]["status"] == 201 and sent[1]["body"] == b"taken"


@pytest.mark.parametrize(
    "scope",
    [
        _scope(method="GET"),
        _scope(path="/w/x"),
        _scope(query_string=b"dry=1"),
        _scope(headers={b"authorization": b"Bearer unknown"}),
        _scope(headers={b"authorization": None}),
        _scope(headers={b"content-type": b"application/yaml"}),
        _scope(headers={b"content-length": None}),  # chunked
        _scope(headers={b"content-length": b"11"}),  # over max_bytes
        _scope(headers={b"content-length": b"x"}),
    ],
)
def test_every_other_request_goes_to_the_app_unread(scope: dict[str, Any]) -> None:
    shortcut, taken = _shortcut(Response(b"taken", 201))
    sent, app_bodies = _call(shortcut, scope, b"{}")
    assert taken == [] and app_bodies == [b"{}"] and sent[1]["body"] == b"app"


def test_a_body_the_handler_gives_back_is_replayed_to_the_app() -> None:
    shortcut, taken = _shortcut(None)
    sent, app_bodies = _call(shortcut, _scope(), b"{}")
    assert taken == [b"{}"] and app_bodies == [b"{}"] and sent[1]["body"] == b"app"


# -- the same answers as the route (the real app) -------------------------------------------------


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Store]]:
    path: Path = tmp_path_factory.mktemp("shortcut") / "fleetshare.db"
    plane = ControlPlane(load_config(None), Store(f"sqlite:///{path}"))
    with TestClient(create_app(plane)) as client:
        yield client, plane.store
    plane.store.close()


def _comparable(answer: Any) -> tuple[int, Any]:
    """A response without what differs between two submissions (id, name, time) and what
    the loop may have decided by the time of the answer (a reason to wait)."""
    body = answer.json()
    if answer.status_code == 201:
        differ = ("id", "name", "submitted_at", "spec", "pending_reason", "queue_position")
        body = {k: v for k, v in body.items() if k not in differ}
    return answer.status_code, body


@pytest.mark.parametrize(
    ("scope", "body", "status"),
    [
        ("admin", json.dumps(job("{name}", "team-a")), 201),
        ("team:team-a", json.dumps(job("{name}", "team-a")), 201),
        ("team:team-a", json.dumps(job("{name}", "team-b")), 403),
        ("viewer", json.dumps(job("{name}", "team-a")), 403),
        ("admin", json.dumps({"name": "{name}", "team": "team-a", "pods": 0}), 422),
        ("admin", '{"name": "{name}", "team": "team-a", "requests": {"cpu": NaN}}', 422),
        ("admin", '{"name": "{name}", "name": "x", "team": "team-a"}', 422),
        ("admin", "[1, 2", 422),
        ("admin", json.dumps(job("taken", "team-a")), 409),
    ],
)
def test_the_shortcut_answers_as_the_route(
    service: tuple[TestClient, Store], scope: str, body: str, status: int
) -> None:
    """A chunked body (no Content-Length) goes through the route, the same bytes with a
    Content-Length through the shortcut: the same status and body."""
    client, store = service
    auth = _auth(store, scope)
    if status == 409:
        client.post("/api/v1/workloads", json=job("taken", "team-a"), headers=auth)
    headers = {**auth, "content-type": "application/json"}
    answers = []
    for via in ("route", "shortcut"):
        content = body.replace("{name}", f"{scope.replace(':', '-')}-{status}-{via}").encode()
        sent = iter([content]) if via == "route" else content
        answers.append(client.post("/api/v1/workloads", content=sent, headers=headers))
    assert answers[0].status_code == status, answers[0].text
    assert _comparable(answers[0]) == _comparable(answers[1])


def _auth(store: Store, scope: str = "admin") -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(store, scope)[1]}"}
