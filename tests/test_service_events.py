"""The event log as a server-sent event stream (GET /api/v1/events/stream) of a real server:
live, resumable with Last-Event-ID, scoped like the paged endpoint; and
``fleetshare events --follow`` on it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fleetshare.service.auth import create_token, revoke_token
from fleetshare.service.client import Client, sse_messages
from fleetshare.service.store import Store
from tests.service_helpers import Server, cli_env, job, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("events")
    srv = start_server(f"sqlite:///{workdir / 'fleetshare.db'}", workdir)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def tokens(server: Server) -> dict[str, str]:
    store = Store(server.db)
    out = {s: create_token(store, s)[1] for s in ("admin", "team:team-a", "team:team-b")}
    store.close()
    return out


class Reader:
    """Reads a stream in a thread, collecting its messages."""

    def __init__(self, server: Server, token: str, **headers: str) -> None:
        self.messages: list[tuple[str | None, dict[str, Any]]] = []
        self.status: int | None = None
        self._stop = threading.Event()
        self._client = server.client(token)
        self._headers = headers
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with self._client.stream(
                "GET", "/api/v1/events/stream", headers=self._headers
            ) as response:
                self.status = response.status_code
                for event_id, data in sse_messages(response.iter_lines()):
                    if data:
                        self.messages.append((event_id, json.loads(data)))
                    if self._stop.is_set():
                        return
        except httpx.HTTPError:
            if not self._stop.is_set():
                raise

    def wait(self, predicate: Any, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self.messages):
            assert time.monotonic() < deadline, f"timed out: {self.messages}"
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._client.close()
        self._thread.join(timeout=0.5)  # a daemon: it ends at the next message


def kinds(messages: list[tuple[str | None, dict[str, Any]]], workload: str) -> list[str]:
    return [m["kind"] for _, m in messages if m["workload"] == workload]


def test_the_stream_is_live_and_ids_match_the_log(server: Server, tokens: dict[str, str]) -> None:
    reader = Reader(server, tokens["admin"])
    try:
        time.sleep(0.5)
        with server.client(tokens["admin"]) as admin:
            assert admin.post("/api/v1/workloads", json=job("live-1", "team-a")).status_code == 201
            reader.wait(lambda m: "admit" in kinds(m, "live-1"))
            assert reader.status == 200
            ids = [int(i) for i, _ in reader.messages if i is not None]
            assert ids == sorted(set(ids))
            assert all(str(m["id"]) == i for i, m in reader.messages)
            paged = admin.get("/api/v1/events", params={"after": ids[0] - 1}).json()["items"]
            assert [e["id"] for e in paged][: len(ids)] == ids
            admin.delete("/api/v1/workloads/live-1")
    finally:
        reader.close()


def test_resume_with_last_event_id(server: Server, tokens: dict[str, str]) -> None:
    with server.client(tokens["admin"]) as admin:
        admin.post("/api/v1/workloads", json=job("resume-1", "team-b"))
        admin.post("/api/v1/workloads", json=job("resume-2", "team-b"))
        events = admin.get("/api/v1/events", params={"limit": 1000}).json()["items"]
        first = next(e for e in events if e["workload"] == "resume-1")
        reader = Reader(server, tokens["admin"], **{"Last-Event-ID": str(first["id"])})
        try:
            reader.wait(lambda m: "submit" in kinds(m, "resume-2"))
            assert reader.messages[0][1]["id"] == first["id"] + 1
            assert "submit" not in kinds(reader.messages, "resume-1")
        finally:
            reader.close()
        for name in ("resume-1", "resume-2"):
            admin.delete(f"/api/v1/workloads/{name}")


def test_a_team_stream_holds_its_team_only(server: Server, tokens: dict[str, str]) -> None:
    reader = Reader(server, tokens["team:team-a"], **{"Last-Event-ID": "0"})
    try:
        with server.client(tokens["admin"]) as admin:
            admin.post("/api/v1/workloads", json=job("scope-b", "team-b"))
            admin.post("/api/v1/workloads", json=job("scope-a", "team-a"))
            reader.wait(lambda m: "submit" in kinds(m, "scope-a"))
            time.sleep(0.5)
            assert {m["team"] for _, m in reader.messages} == {"team-a"}
            assert "scope-b" not in json.dumps(reader.messages)
            admin.delete("/api/v1/workloads/scope-a")
            admin.delete("/api/v1/workloads/scope-b")
    finally:
        reader.close()


def test_a_preemption_by_another_team_names_neither_it_nor_its_workload(
    server: Server, tokens: dict[str, str]
) -> None:
    """team-b reclaims the GPU team-a borrowed: team-a's preempt event, paged and streamed,
    names neither team-b nor team-b's workload (not even in its message); the admin's does."""
    reader = Reader(server, tokens["team:team-a"], **{"Last-Event-ID": "0"})
    names = ["reclaim-a0", "reclaim-a1", "reclaim-a2", "reclaim-b0", "reclaim-b1"]
    try:
        with server.client(tokens["admin"]) as admin:
            for name in names[:3]:  # quota 2, borrowing 1: all three run
                assert admin.post("/api/v1/workloads", json=job(name, "team-a")).status_code == 201
            reader.wait(lambda m: sum("admit" in kinds(m, n) for n in names[:3]) == 3)
            for name in names[3:]:  # team-b's quota: it takes its lent GPU back
                assert admin.post("/api/v1/workloads", json=job(name, "team-b")).status_code == 201
            reader.wait(lambda m: any(e["kind"] == "preempt" for _, e in m))
            with server.client(tokens["team:team-a"]) as team_a:
                paged = team_a.get("/api/v1/events", params={"limit": 1000}).json()["items"]
            theirs = [e for e in paged if e["kind"] == "preempt"]
            streamed = [e for _, e in reader.messages if e["kind"] == "preempt"]
            assert theirs and streamed
            for event in theirs + streamed:
                assert event["details"]["by"] == "a workload of another team"
                assert event["details"]["reason"] == "reclaim"
                text = json.dumps(event)
                assert "team-b" not in text and "reclaim-b" not in text, text
            full = admin.get("/api/v1/events", params={"limit": 1000}).json()["items"]
            preempt = next(e for e in full if e["kind"] == "preempt")
            assert preempt["details"]["by"].startswith("reclaim-b")
            assert "team-b" in preempt["details"]["message"]
            for name in names:
                admin.delete(f"/api/v1/workloads/{name}")
    finally:
        reader.close()


def test_the_stream_wants_a_token(server: Server) -> None:
    assert httpx.get(f"{server.url}/api/v1/events/stream").status_code == 401
    headers = {"Authorization": "Bearer fs_nope"}
    assert httpx.get(f"{server.url}/api/v1/events/stream", headers=headers).status_code == 401
    bad = httpx.get(
        f"{server.url}/api/v1/events/stream",
        params={"after": -1},
        headers={"Authorization": f"Bearer {create_token(Store(server.db), 'viewer')[1]}"},
    )
    assert bad.status_code == 422 and "after" in bad.text


def test_client_follow_events_resumes_after_a_dropped_connection(
    server: Server, tokens: dict[str, str]
) -> None:
    client = Client(server.url, tokens["team:team-b"])
    seen: list[dict[str, Any]] = []
    with server.client(tokens["admin"]) as admin:
        start = admin.get("/api/v1/events", params={"limit": 1000}).json()["items"][-1]["id"]
        admin.post("/api/v1/workloads", json=job("follow-1", "team-b"))

        def stop() -> bool:
            return any(e["workload"] == "follow-1" and e["kind"] == "admit" for e in seen)

        for event in client.follow_events(start, retry=0.1, stop=stop):
            seen.append(event)
        assert [e["id"] for e in seen] == sorted({e["id"] for e in seen})
        assert seen[0]["id"] > start and seen[0]["kind"] == "submit"
        admin.delete("/api/v1/workloads/follow-1")
    client.close()


def test_revoked_token_is_refused_by_follow(server: Server) -> None:
    store = Store(server.db)
    token_id, token = create_token(store, "viewer")
    assert revoke_token(store, token_id)
    store.close()
    client = Client(server.url, token)
    with pytest.raises(Exception, match="401"):
        next(iter(client.follow_events(0, retry=0.1)))
    client.close()


def test_cli_events_follow(server: Server, tokens: dict[str, str]) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "fleetshare.cli", "events", "--follow", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**cli_env(), "FLEETSHARE_SERVER": server.url, "FLEETSHARE_TOKEN": tokens["admin"]},
    )
    lines: list[dict[str, Any]] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(json.loads(line))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    try:
        time.sleep(2.0)  # history printed, stream open
        with server.client(tokens["admin"]) as admin:
            admin.post("/api/v1/workloads", json=job("cli-follow", "team-a"))
            deadline = time.monotonic() + 15
            while not any(e["workload"] == "cli-follow" and e["kind"] == "admit" for e in lines):
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                assert time.monotonic() < deadline, lines[-5:]
                time.sleep(0.05)
            admin.delete("/api/v1/workloads/cli-follow")
        ids = [e["id"] for e in lines]
        assert ids == sorted(set(ids)) and ids[0] == 1
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize("position", [2**63 - 1, 2**63, 2**64, 10**30])
def test_a_position_past_any_id_is_answered_not_a_500(
    server: Server, tokens: dict[str, str], position: int
) -> None:
    """Ids are 64-bit (SQLite's INTEGER): ``?after=`` up to 2^63 - 1 is a position past every
    event (an empty page), beyond it a 422 naming ``after``; it was a 500 (integer overflow)
    any token could cause, and it broke the event stream."""
    with server.client(tokens["team:team-a"]) as team:
        for path in ("/api/v1/events", "/api/v1/workloads"):
            page = team.get(path, params={"after": position})
            if position <= 2**63 - 1:
                assert page.status_code == 200, page.text
                assert page.json() == {"items": [], "next_after": None}
            else:
                assert page.status_code == 422, page.text
                assert [e["loc"] for e in page.json()["detail"]] == [["query", "after"]]
        if position > 2**63 - 1:  # (a valid one opens a stream that never ends)
            stream = team.get("/api/v1/events/stream", headers={"Last-Event-ID": str(position)})
            assert stream.status_code == 422, stream.text
            assert [e["loc"] for e in stream.json()["detail"]] == [["header", "Last-Event-ID"]]
        # still served: the next request works
        assert team.get("/api/v1/events").status_code == 200
