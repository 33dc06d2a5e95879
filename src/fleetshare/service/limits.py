"""Request bodies, bounded and checked before the API sees them.

At most :data:`MAX_BODY_BYTES` (1 MiB) are read (a larger ``Content-Length`` is refused before
reading; a chunked body is cut off when it grows past the limit): 413. A JSON body goes through
:func:`fleetshare.inputs.parse_json`, the checks every user file gets (UTF-8, no duplicate
keys, nesting at most 64 deep, no ``NaN``/``Infinity``): 422 naming the problem. The API then
parses the same bytes with its pydantic models (unknown fields refused, quantities bounded).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fleetshare.inputs import InputError, decode, parse_json

MAX_BODY_BYTES = 1 << 20


class BodyLimits:
    """Pure ASGI middleware (see the module docstring)."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                await _reply(send, 400, "Content-Length is not a number")
                return
            if int(length) > self.max_bytes:
                await _reply(send, 413, f"request body over {self.max_bytes:,} bytes")
                return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _reply(send, 413, f"request body over {self.max_bytes:,} bytes")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        content_type = headers.get("content-type", "")
        if body and "json" in content_type:
            try:
                parse_json(decode(body, "request body"), "request body")
            except InputError as exc:
                # shaped as FastAPI's 422 (the spec's HTTPValidationError)
                problem = {"loc": ["body"], "msg": str(exc), "type": "body"}
                await _reply(send, 422, [problem])
                return
        await self.app(scope, replaying(body, receive), send)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app ``body`` (already read) as the whole request, then
    whatever ``receive`` brings next (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _reply(send: Send, status: int, detail: str | list[dict[str, Any]]) -> None:
    payload: dict[str, Any] = {"detail": detail}
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
