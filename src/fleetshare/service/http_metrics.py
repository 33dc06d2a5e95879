"""Request latency and outcomes by route, as Prometheus metrics (ASGI middleware).

``fleetshare_http_request_duration_seconds{method, route, code}``: a histogram of the time
from a request's arrival to the end of its response, per route *template*
(``/api/v1/workloads/{name}``, never the raw path, so a scan of made-up paths adds no
series: paths no route matches count as ``unmatched``). Errors are its ``_count`` with
``code`` 4xx or 5xx. A streamed response (``/api/v1/events/stream``) counts once it ends.

The middleware sits outermost, so requests answered on the hot path before routing
(:class:`~fleetshare.service.shortcut.Shortcut`) are timed too, under their fixed path.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""From 1 ms (a submission on the hot path takes about 2 ms) to 10 s."""


def request_histogram(registry: CollectorRegistry) -> Histogram:
    """The histogram above, on ``registry``."""
    return Histogram(
        "fleetshare_http_request_duration_seconds",
        "Time from a request's arrival to the end of its response, by route template.",
        ["method", "route", "code"],
        buckets=BUCKETS,
        registry=registry,
    )


class RequestMetrics:
    """Time every HTTP request into ``duration`` (:func:`request_histogram`)."""

    def __init__(self, app: ASGIApp, duration: Histogram, fixed: Collection[str] = ()) -> None:
        """``fixed``: paths answered before routing, labelled as they are."""
        self.app = app
        self.fixed = frozenset(fixed)
        self.duration = duration

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        code = [500]  # an exception before the response started: the server answers 500

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                code[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.duration.labels(scope["method"], self._route(scope), str(code[0])).observe(
                time.perf_counter() - start
            )

    def _route(self, scope: Scope) -> str:
        route: Any = scope.get("route")
        path = getattr(route, "path", None)
        if isinstance(path, str):
            return path
        return scope["path"] if scope["path"] in self.fixed else "unmatched"
