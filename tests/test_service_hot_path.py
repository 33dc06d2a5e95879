"""The API's hot path: the token cache, group commit, and a batch of submissions committed in the
store (SQLite and a real PostgreSQL); no HTTP server."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from fleetshare.scenario.schema import WorkloadSpec
from fleetshare.service import auth
from fleetshare.service import store as store_tables
from fleetshare.service.auth import Principal, TokenCache, create_token, revoke_token
from fleetshare.service.config import load_config
from fleetshare.service.group_commit import GroupCommit
from fleetshare.service.plane import ControlPlane
from fleetshare.service.store import Store
from tests.service_helpers import job

# -- the token cache ---------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'fleetshare.db'}")
    s.create()
    return s


def test_a_valid_token_is_read_once_and_a_revoked_one_refused_after_the_bound(
    store: Store,
) -> None:
    clock = _Clock()
    cache = TokenCache(store, seconds=1.0, clock=clock)
    token_id, token = create_token(store, "team:team-a")
    header = f"Bearer {token}"
    assert cache.cached(header) is None  # never seen: the store must be asked
    found = cache.authenticate(header)
    assert found is not None and found.scope == "team:team-a" and found.token_id == token_id
    assert cache.cached(header) == found
    assert revoke_token(store, token_id)
    clock.now = 0.9
    assert cache.cached(header) == found  # within the bound the server still trusts it
    clock.now = 1.0
    assert cache.cached(header) is None
    assert cache.authenticate(header) is None
    assert cache.cached(header) is None  # and it stays refused


def test_a_token_leaving_the_cache_is_read_once_for_all_the_requests_that_bring_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock()
    cache = TokenCache(store, seconds=1.0, clock=clock)
    _, token = create_token(store, "team:team-a")
    header = f"Bearer {token}"
    reads: list[str] = []
    lookup = auth._lookup

    def counted(s: Store, token_hash: str) -> Principal | None:
        reads.append(token_hash)
        time.sleep(0.05)  # the other requests arrive while the store is read
        return lookup(s, token_hash)

    monkeypatch.setattr(auth, "_lookup", counted)

    async def requests(headers: list[str | None]) -> list[Principal | None]:
        return await asyncio.gather(*(cache.principal(h) for h in headers))

    found = asyncio.run(requests([header] * 20 + ["Bearer fs_unknown"] * 5 + [None]))
    assert found[:20] == [found[0]] * 20 and found[0] is not None
    assert found[20:] == [None] * 6
    assert len(reads) == 2  # the token once, the unknown one once; no header: no read
    clock.now = 0.5
    asyncio.run(requests([header] * 5))
    assert len(reads) == 2  # cached
    clock.now = 1.5
    asyncio.run(requests([header] * 5))
    assert len(reads) == 3  # left the cache: read again, once


def test_invalid_tokens_are_never_cached_and_a_new_token_works_at_once(store: Store) -> None:
    cache = TokenCache(store, seconds=60.0, clock=_Clock())
    for header in (None, "", "Basic abc", "Bearer fs_unknown", "Bearer not-a-token"):
        assert cache.authenticate(header) is None
        assert cache.cached(header) is None
    _, token = create_token(store, "viewer")
    assert cache.authenticate(f"Bearer {token}") is not None
    # the same token under another bearer spelling is the same entry; a longer one is not
    assert cache.cached(f"bearer  {token}") is not None
    assert cache.cached(f"Bearer {token}x") is None


# -- group commit ------------------------------------------------------------------------------


@dataclass(eq=False)
class _Item:
    value: int
    error: BaseException | None = None
    committed: bool = False


class _Recorder:
    """A commit function: records each batch; holds the first until released."""

    def __init__(self, refuse: int | None = None, fail: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.release = threading.Event()
        self.started = threading.Event()
        self.refuse = refuse
        self.fail = fail

    def __call__(self, batch: list[_Item]) -> None:
        self.started.set()
        self.release.wait(10)
        self.batches.append([i.value for i in batch])
        if self.fail:
            raise RuntimeError("disk full")
        for item in batch:
            if item.value == self.refuse:
                item.error = ValueError("refused")
            else:
                item.committed = True


def test_items_queued_during_a_commit_go_together_in_the_next() -> None:
    recorder = _Recorder(refuse=3)
    commits = GroupCommit(recorder)
    results: dict[int, _Item] = {}

    def send(value: int) -> None:
        results[value] = commits.submit(_Item(value))

    first = threading.Thread(target=send, args=(0,))
    first.start()
    assert recorder.started.wait(10)  # the first batch is committing: the rest queue up
    others = [threading.Thread(target=send, args=(v,)) for v in (1, 2, 3)]
    for t in others:
        t.start()
    while commits.queued < 3:
        threading.Event().wait(0.01)
    recorder.release.set()
    for t in [first, *others]:
        t.join(10)
    commits.close()
    assert recorder.batches[0] == [0]
    assert sorted(recorder.batches[1]) == [1, 2, 3] and len(recorder.batches) == 2
    assert all(results[v].committed for v in (0, 1, 2))
    assert isinstance(results[3].error, ValueError) and not results[3].committed


def test_a_coroutine_is_answered_only_after_its_batch_committed() -> None:
    recorder = _Recorder()
    commits = GroupCommit(recorder)

    async def main() -> list[_Item]:
        tasks = [asyncio.ensure_future(commits.submit_async(_Item(v))) for v in range(5)]
        await asyncio.sleep(0.05)
        assert not any(t.done() for t in tasks)  # the commit is held: nobody is answered
        recorder.release.set()
        return list(await asyncio.gather(*tasks))

    items = asyncio.run(main())
    commits.close()
    assert all(item.committed for item in items)
    assert sorted(v for batch in recorder.batches for v in batch) == list(range(5))


def test_a_failed_batch_fails_each_of_its_items() -> None:
    recorder = _Recorder(fail=True)
    recorder.release.set()
    commits = GroupCommit(recorder)
    item = commits.submit(_Item(1))
    commits.close()
    assert isinstance(item.error, RuntimeError) and not item.committed
    # after close, a new item starts the writer again
    recorder.fail = False
    assert commits.submit(_Item(2)).committed
    commits.close()


# -- one batch of submissions in the store ---------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "postgresql":
        s = Store(request.getfixturevalue("postgresql").database())
    else:
        s = Store(f"sqlite:///{tmp_path / 'fleetshare.db'}")
    yield s
    s.close()


def test_a_batch_commits_new_names_in_submission_order_and_refuses_taken_ones(
    any_store: Store,
) -> None:
    plane = ControlPlane(load_config(None), any_store, mode="api")
    principal = Principal(1, "team:team-a")

    def item(name: str) -> Any:
        return plane._submission(WorkloadSpec.model_validate(job(name, "team-a")), principal)

    assert plane.submit(WorkloadSpec.model_validate(job("old", "team-a")), principal)["id"]
    batch = [item("b"), item("old"), item("a"), item("b")]
    note = 'it\'s "quoted" \\ 100 %s %(x)s é; COMMIT; --'  # values are data, never SQL
    batch[2].spec["labels"] = {"note": note}
    plane._commit_submissions(batch)  # what the commit thread does with a batch
    assert [type(i.error).__name__ for i in batch] == [
        "NoneType",
        "Conflict",
        "NoneType",
        "Conflict",
    ]
    w, e = store_tables.workloads, store_tables.events
    with any_store.read("workloads-read") as conn:
        rows = conn.execute(
            select(w.c.id, w.c.name, w.c.submitted_at, w.c.spec).order_by(w.c.id)
        ).all()
        events = conn.execute(
            select(e.c.kind, e.c.workload, e.c.at, e.c.details).order_by(e.c.id)
        ).all()
    assert [r.name for r in rows] == ["old", "b", "a"]
    assert rows[2].spec["labels"] == {"note": note}
    ok = [batch[0], batch[2]]
    # the answers are the rows as committed
    assert [(i.row["id"], i.row["name"]) for i in ok] == [(r.id, r.name) for r in rows[1:]]
    assert all(i.row["submitted_at"] == r.submitted_at for i, r in zip(ok, rows[1:], strict=True))
    submits = [ev for ev in events if ev.kind == "submit"]
    assert [ev.workload for ev in submits] == ["old", "b", "a"]
    assert [ev.at for ev in submits[1:]] == [r.submitted_at for r in rows[1:]]
    assert submits[1].details == {"pods": 1, "by": "token 1 (team:team-a)"}
    plane.close()
