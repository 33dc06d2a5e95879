"""API tokens: bearer tokens with a scope, stored as hashes.

A token is ``fs_`` + 32 random bytes from :func:`secrets.token_urlsafe`; the store keeps only
its SHA-256 (a random 256-bit secret needs no salt or slow hash: nobody can guess it from its
hash). It is shown once, when created. Scopes:

- ``admin``: everything, including the policy;
- ``viewer``: read everything (teams, workloads, nodes, events, the policy), change nothing;
- ``team:NAME``: read and submit/cancel only team NAME's workloads; another team's workload
  is answered as if it did not exist (404).

The API authenticates through a :class:`TokenCache`: a token found valid is trusted for
:data:`TOKEN_CACHE_SECONDS` without a read of the store, so a revocation takes effect within
that time.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from fleetshare.service.store import Store, api_tokens

TOKEN_PREFIX = "fs_"
_TEAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,252}$")


class ScopeError(ValueError):
    """A scope that is not admin, viewer or team:NAME."""


def check_scope(scope: str) -> str:
    """``scope`` if valid, else :class:`ScopeError`."""
    if scope in ("admin", "viewer"):
        return scope
    kind, _, team = scope.partition(":")
    if kind == "team" and _TEAM_NAME.match(team):
        return scope
    raise ScopeError(f"scope {scope!r}: give admin, viewer or team:NAME")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from."""

    token_id: int
    scope: str

    @property
    def admin(self) -> bool:
        return self.scope == "admin"

    @property
    def team(self) -> str | None:
        """The team a team token is limited to; None for admin and viewer."""
        return self.scope.split(":", 1)[1] if self.scope.startswith("team:") else None

    @property
    def can_write_workloads(self) -> bool:
        return self.scope != "viewer"

    def sees_team(self, team: str) -> bool:
        """May read (and, unless viewer, change) ``team``'s workloads."""
        return self.team is None or self.team == team

    @property
    def actor(self) -> str:
        """How the audit log names it."""
        return f"token {self.token_id} ({self.scope})"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_token(store: Store, scope: str, name: str = "") -> tuple[int, str]:
    """A new token for ``scope``: its id and the token itself (shown only now)."""
    check_scope(scope)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with store.write("token-write") as conn:
        result = conn.execute(
            api_tokens.insert().values(
                token_hash=hash_token(token), scope=scope, name=name, created_at=time.time()
            )
        )
        assert result.inserted_primary_key is not None
        token_id = int(result.inserted_primary_key[0])
    return token_id, token


def list_tokens(store: Store) -> list[dict[str, Any]]:
    """Every token (never the secret): id, scope, name, created and revoked times."""
    with store.read("token-read") as conn:
        rows = conn.execute(
            select(
                api_tokens.c.id,
                api_tokens.c.scope,
                api_tokens.c.name,
                api_tokens.c.created_at,
                api_tokens.c.revoked_at,
            ).order_by(api_tokens.c.id)
        ).all()
    return [dict(row._mapping) for row in rows]


def revoke_token(store: Store, token_id: int) -> bool:
    """Revoke a token; False when there is no such (unrevoked) token."""
    with store.write("token-write") as conn:
        result = conn.execute(
            api_tokens.update()
            .where(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None))
            .values(revoked_at=time.time())
        )
        return result.rowcount == 1


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, or None when it holds none."""
    if not authorization:
        return None
    kind, _, token = authorization.partition(" ")
    token = token.strip()
    if kind.lower() != "bearer" or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    return token


def _lookup(store: Store, token_hash: str) -> Principal | None:
    with store.read("token-read") as conn:
        row = conn.execute(
            select(api_tokens.c.id, api_tokens.c.scope).where(
                api_tokens.c.token_hash == token_hash, api_tokens.c.revoked_at.is_(None)
            )
        ).first()
    return None if row is None else Principal(int(row.id), str(row.scope))


def authenticate(store: Store, authorization: str | None) -> Principal | None:
    """The principal of an ``Authorization: Bearer TOKEN`` header, or None (read from the
    store)."""
    token = bearer_token(authorization)
    return None if token is None else _lookup(store, hash_token(token))


TOKEN_CACHE_SECONDS = 1.0
"""How long a server trusts a token it found valid without reading the store again: a revoked
token is refused within this time."""


class TokenCache:
    """Tokens found valid in the last ``seconds``, by hash: a request with one of them is
    authenticated without a read of the store (the API's hot path). Invalid tokens are never
    cached (each such request reads the store), so a new token works at once and a revoked
    one is refused within ``seconds``."""

    MAX_ENTRIES = 10_000

    def __init__(
        self,
        store: Store,
        seconds: float = TOKEN_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.seconds = seconds
        self._clock = clock
        self._valid: dict[str, tuple[float, Principal]] = {}
        self._reading: dict[str, asyncio.Future[Principal | None]] = {}

    def cached(self, authorization: str | None) -> Principal | None:
        """The principal when the header's token was found valid less than ``seconds`` ago;
        None means: ask :meth:`authenticate`."""
        token = bearer_token(authorization)
        if token is None:
            return None
        entry = self._valid.get(hash_token(token))
        if entry is None or self._clock() - entry[0] >= self.seconds:
            return None
        return entry[1]

    async def principal(self, authorization: str | None) -> Principal | None:
        """:meth:`cached`, else :meth:`authenticate` in a worker thread: once for all the
        requests that bring the same header meanwhile (when a token leaves the cache, the
        store is read once, not once per connection that uses it)."""
        found = self.cached(authorization)
        if found is not None or authorization is None:
            return found
        reading = self._reading.get(authorization)
        if reading is None or reading.get_loop() is not asyncio.get_running_loop():
            reading = asyncio.ensure_future(asyncio.to_thread(self.authenticate, authorization))
            self._reading[authorization] = reading
            reading.add_done_callback(self._read)
        return await asyncio.shield(reading)

    def _read(self, reading: asyncio.Future[Principal | None]) -> None:
        for header, pending in list(self._reading.items()):
            if pending is reading:
                del self._reading[header]

    def authenticate(self, authorization: str | None) -> Principal | None:
        """The header's principal read from the store (and remembered), or None."""
        token = bearer_token(authorization)
        if token is None:
            return None
        token_hash = hash_token(token)
        found = _lookup(self.store, token_hash)
        if found is None:
            self._valid.pop(token_hash, None)
            return None
        if len(self._valid) >= self.MAX_ENTRIES:
            self._valid.clear()
        self._valid[token_hash] = (self._clock(), found)
        return found
