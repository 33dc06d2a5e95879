"""The REST endpoints for the event log (part of the API of :mod:`fleetshare.service.api`).

``GET /api/v1/events`` (a page at a time) and ``GET /api/v1/events/stream`` (server-sent
events). A team token sees its own team's events, and a preemption by another team's workload
without that team's name.
"""

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from sqlalchemy import Row, func, select

from fleetshare.service import store as tables
from fleetshare.service.api_errors import TooMany
from fleetshare.service.api_workloads import MAX_PAGE
from fleetshare.service.auth import Principal, authenticate
from fleetshare.service.plane import ControlPlane

MAX_STREAMS = 64
"""Event streams open at once (each polls the store)."""
STREAM_POLL_SECONDS = 0.25
STREAM_KEEPALIVE_SECONDS = 15.0
STREAM_REAUTH_SECONDS = 10.0
"""A stream checks its token this often, and ends once it is revoked."""
STREAM_RETRY_MS = 2000

_FOREIGN_PREEMPTION = {
    "reclaim": "another team reclaims its lent quota; {team} was borrowing",
    "reclaim-while-borrowing": (
        "a workload of another team must borrow and preempts borrowed work of lower priority"
    ),
    "fair-share": "fair share: another team borrows less than {team} (weighted dominant share)",
}
"""A preemption's message as a team token sees it when the preemptor is another team's
(the engine's, ``governance/cycle.py`` ``_why``, names that team and its workload)."""


class EventOut(BaseModel):
    id: int
    at: str
    kind: str
    workload: str | None
    team: str | None
    details: dict[str, Any]


class EventPage(BaseModel):
    items: list[EventOut]
    next_after: int | None


class _Streams:
    """Counts open event streams (at most ``limit``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self._lock = threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self.open >= self.limit:
                return False
            self.open += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.open -= 1


class _Log:
    """The event log as ``who`` may read it."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def event_out(self, r: Row[Any], who: Principal) -> EventOut:
        """An event as ``who`` may see it (another team's preemptor is not named)."""
        details = dict(r.details)
        if "by_team" in details:
            if who.team is not None and details["by_team"] not in (None, who.team):
                details["by"] = "a workload of another team"
                # the engine's message names the preemptor and its team
                details["message"] = _FOREIGN_PREEMPTION.get(
                    str(details.get("reason")), "preempted by a workload of another team"
                ).format(team=who.team)
            details.pop("by_team")
        return EventOut(
            id=r.id,
            at=self.plane.datetime(r.at) or "",
            kind=r.kind,
            workload=r.workload,
            team=r.team,
            details=details,
        )

    def events_after(self, who: Principal, after: int, limit: int) -> list[Row[Any]]:
        e = tables.events
        query = select(e).where(e.c.id > after).order_by(e.c.id).limit(limit)
        if who.team is not None:
            query = query.where(e.c.team == who.team)
        with self.plane.store.read("events-read") as conn:
            return list(conn.execute(query).all())

    def stream_start(self, who: Principal, backlog: int) -> int:
        """The id after which a stream without a position starts: the latest event, less
        ``backlog`` of those ``who`` sees."""
        e = tables.events
        with self.plane.store.read("events-read") as conn:
            latest = conn.execute(select(func.max(e.c.id))).scalar() or 0
            if not backlog:
                return int(latest)
            query = select(e.c.id).where(e.c.id <= latest).order_by(e.c.id.desc()).limit(backlog)
            if who.team is not None:
                query = query.where(e.c.team == who.team)
            ids = list(conn.execute(query).scalars())
        return min(ids) - 1 if ids else int(latest)

    async def messages(
        self, request: Request, who: Principal, start: int, streams: _Streams
    ) -> AsyncIterator[str]:
        """The stream's messages after event ``start``, until the client goes or its token
        is revoked (it leaves ``streams`` then)."""
        header = request.headers.get("authorization")
        position = start
        quiet = 0.0
        checked = time.monotonic()
        try:
            yield f"retry: {STREAM_RETRY_MS}\n\n"
            while not await request.is_disconnected():
                if time.monotonic() - checked > STREAM_REAUTH_SECONDS:
                    checked = time.monotonic()
                    if await run_in_threadpool(authenticate, self.plane.store, header) is None:
                        return  # the token was revoked
                rows = await run_in_threadpool(self.events_after, who, position, MAX_PAGE)
                for r in rows:
                    data = self.event_out(r, who).model_dump_json()
                    yield f"id: {r.id}\ndata: {data}\n\n"
                    position = r.id
                if rows:
                    quiet = 0.0
                    continue
                if quiet >= STREAM_KEEPALIVE_SECONDS:
                    quiet = 0.0
                    yield ": keepalive\n\n"
                await asyncio.sleep(STREAM_POLL_SECONDS)
                quiet += STREAM_POLL_SECONDS
        finally:
            streams.leave()


def router(plane: ControlPlane, principal: Callable[..., Awaitable[Principal]]) -> APIRouter:
    """The endpoints over ``plane``; ``principal`` authenticates a request."""
    routes = APIRouter()
    Who = Annotated[Principal, Depends(principal)]
    log = _Log(plane)
    streams = _Streams(MAX_STREAMS)

    @routes.get(
        "/api/v1/events/stream",
        tags=["events"],
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "server-sent events: `id:` the event id, `data:` an Event",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            429: {"description": "too many open streams"},
        },
    )
    async def stream_events(
        request: Request,
        who: Who,
        after: Annotated[
            int | None,
            Query(ge=0, le=tables.MAX_ID, description="start after this event id (default: now)"),
        ] = None,
        backlog: Annotated[
            int,
            Query(ge=0, le=MAX_PAGE, description="without a position: first send this many"),
        ] = 0,
        last_event_id: Annotated[
            str | None,
            Header(
                alias="Last-Event-ID",
                max_length=20,
                description="resume after this id (what EventSource sends on reconnecting)",
            ),
        ] = None,
    ) -> StreamingResponse:
        """The event log as a server-sent event stream, scoped as ``/api/v1/events`` (a
        team token sees its own team's). Each message is ``id: N`` and ``data: {Event}``;
        a comment every 15 s keeps it open. It starts after ``Last-Event-ID`` (a reconnect),
        else after ``?after=``, else at the latest event (less ``backlog`` of them)."""
        start = after
        if last_event_id is not None:
            start = _event_position(last_event_id)
        if start is None:
            start = await run_in_threadpool(log.stream_start, who, backlog)
        if not streams.enter():
            raise TooMany(f"at most {MAX_STREAMS} event streams are open; try again later")
        return StreamingResponse(
            log.messages(request, who, start, streams),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @routes.get("/api/v1/events", response_model=EventPage, tags=["events"])
    def list_events(
        who: Who,
        after: Annotated[
            int, Query(ge=0, le=tables.MAX_ID, description="events with ids after this one")
        ] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    ) -> EventPage:
        """The event log in order (admit, preempt with reason, finish, cancel, node join and
        leave, policy changes, autoscaler actions), a page at a time; a team token sees its
        own team's events."""
        rows = log.events_after(who, after, limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        items = [log.event_out(r, who) for r in rows]
        return EventPage(items=items, next_after=rows[-1].id if more else None)

    return routes


def _event_position(last_event_id: str) -> int:
    """The position a reconnecting stream sends back: one of the ids it was sent (422 on the
    header otherwise)."""
    text = last_event_id.strip()
    if not (text.isascii() and text.isdigit() and int(text) <= tables.MAX_ID):
        raise RequestValidationError(
            [
                {
                    "loc": ["header", "Last-Event-ID"],
                    "msg": f"an event id, 0 to {tables.MAX_ID}",
                    "type": "value_error",
                }
            ]
        )
    return int(text)
