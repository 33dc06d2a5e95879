"""The API's hot path, answered without the framework's routing.

Most requests a busy service gets are submissions: ``POST /api/v1/workloads`` with a small JSON
body. Through FastAPI each of them passes the
middleware stack, the router and dependency solving, which cost more CPU than reading,
validating and committing the workload itself (``bench/service_throughput.py``).
:class:`Shortcut` is pure ASGI middleware that takes exactly such a request to the endpoint's
own function, and hands every other request (another path or method, a query string, no
``Content-Length`` or a body over ``max_bytes``, not JSON, no valid token) to the app
unread, so all of them keep the app's checks and answers. The handler is the route's own
function: it answers what it takes as the route does, or gives a request it refuses back to
the app (the body replayed) when the app's answer would come from elsewhere (its middleware).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from fleetshare.service.auth import Principal
from fleetshare.service.limits import replaying

Handler = Callable[[Principal, bytes, str], Awaitable[Response | None]]
"""Answers a request taken: (principal, body, content type) to the response, or None: the app
answers it (its body is replayed to the app; the handler must not have changed anything)."""


class Shortcut:
    """Takes ``POST path`` requests whose ``Authorization`` header ``principal`` accepts to
    ``handler`` (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        path: str,
        principal: Callable[[str | None], Awaitable[Principal | None]],
        handler: Handler,
        max_bytes: int,
    ) -> None:
        self.app = app
        self.path = path
        self.principal = principal
        self.handler = handler
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"] != self.path
            or scope["query_string"]
        ):
            await self.app(scope, receive, send)
            return
        length = content_type = authorization = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = value
            elif name == b"content-type":
                content_type = value.decode("latin-1")
            elif name == b"authorization":
                authorization = value.decode("latin-1")
        if (
            length is None
            or not length.isdigit()
            or int(length) > self.max_bytes
            or content_type is None
            or "json" not in content_type
            or (who := await self.principal(authorization)) is None
        ):
            await self.app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        response = await self.handler(who, body, content_type)
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, replaying(body, receive), send)
