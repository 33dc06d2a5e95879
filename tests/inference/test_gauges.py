"""The serving model run as time goes (inference/serving.py's ``Server``) and the serving
engine's gauges as the scaler reads them (inference/gauges.py)."""

from __future__ import annotations

import numpy as np
import pytest

from fleetshare.inference.gauges import RUNNING, WAITING, Scrape, avg_over_time, scrape_times
from fleetshare.inference.request_trace import AZURE_CONV_2023, Requests, parse_azure, replay
from fleetshare.inference.serving import Server, serve
from fleetshare.inference.spec import ServingSpec

SPEC = ServingSpec(
    prefill_tokens_per_second=1000,
    decode_seconds_per_token=0.02,
    decode_seconds_per_sequence=0.01,
    max_sequences=2,
)


def _requests(*rows: tuple[float, int, int]) -> Requests:
    return Requests(
        np.array([r[0] for r in rows], dtype=np.float64),
        np.array([r[1] for r in rows], dtype=np.int64),
        np.array([r[2] for r in rows], dtype=np.int64),
    )


def test_waiting_and_running_requests_by_hand() -> None:
    """One replica ready at 10 s (placed earlier: its ready time is known before), two slots,
    prefill 1,000 tokens/s. r1 (at 0, 1,000 + 101 tokens) starts at 10, first token 11, last
    13 (100 x 0.02). r2 (at 2, 500 + 6) waits for the prefill engine: starts 11, first token
    11.5, last 11.65 (5 x 0.03, r1 decoding beside it). r3 (at 4, 2,000 + 2) waits for a
    slot: starts 11.65, last 13.67. Waiting just before t: arrived before t, not started
    before t; running: started before t, last token at t or later."""
    server = Server(
        _requests((0.0, 1000, 101), (2.0, 500, 6), (4.0, 2000, 2)), SPEC, count_running=True
    )
    seen = []
    for t in (5.0, 11.0, 11.6, 12.0, 14.0):
        server.know([], [10.0], t)
        server.advance(t)
        seen.append((t, server.waiting(t), server.running(t)))
    assert seen == [(5.0, 3, 0), (11.0, 2, 1), (11.6, 1, 2), (12.0, 0, 2), (14.0, 0, 0)]
    assert server.start.tolist() == pytest.approx([10.0, 11.0, 11.65])
    assert server.last.tolist() == pytest.approx([13.0, 11.65, 13.67])


INTERVALS = [
    (0.0, 25.0),  # three replicas ready together that stop apart: the tie goes by stop
    (0.0, 90.0),
    (0.0, 50.0),
    (10.0, 10.0),  # evicted as it became ready: it never serves
    (20.0, 100.0),
    (20.0, 40.0),
    (45.0, 130.0),
    (70.0, 130.0),
    (70.0, 130.0),
]


def test_the_server_run_as_time_goes_agrees_with_the_post_run_model() -> None:
    """The bundled Azure minute four times over (764 requests in 90 s, more than the
    replicas serve at times): told the replicas every 7.5 s as they are known then (a stop
    only once it has happened), the server starts exactly the requests ``serve`` starts,
    at the same times, and its gauges at each moment are those of the post-run model."""
    requests = replay(
        parse_azure(AZURE_CONV_2023.read_text(), "azure"), speedup=1, copies=4, jitter=30, seed=1
    )
    horizon = 130.0
    after = serve(requests, INTERVALS, SPEC, horizon)
    server = Server(requests, SPEC, count_running=True)
    arrival, start, last = requests.arrival, after.start, after.last
    for t in np.arange(0.0, horizon, 7.5):
        stopped = [(r, s) for r, s in INTERVALS if s < t]
        serving = [r for r, s in INTERVALS if s >= t]
        server.know(stopped, serving, float(t))
        server.advance(float(t))
        started = np.nan_to_num(start, nan=np.inf) < t
        assert server.waiting(float(t)) == int(((arrival < t) & ~started).sum())
        assert server.running(float(t)) == int((started & (last >= t)).sum())
    server.know(INTERVALS, [], np.inf)
    server.advance(horizon)
    online = server.served(horizon)
    assert 0 < int(online.unserved.sum()) < len(requests)  # some wait past the horizon
    for a, b in ((online.start, start), (online.first, after.first), (online.last, last)):
        assert np.array_equal(a, b, equal_nan=True)


def test_scrapes_and_the_window_of_a_gauge_by_hand() -> None:
    # scrapes every 15 s from 0; a tick at 40 after one at 10 sees the scrapes at 15 and 30
    assert scrape_times(-1.0, 30.0, 15.0) == [0.0, 15.0, 30.0]
    assert scrape_times(10.0, 40.0, 15.0) == [15.0, 30.0]
    assert scrape_times(30.0, 44.0, 15.0) == []
    scrapes = [Scrape(0.0, 0, 0), Scrape(15.0, 40, 4), Scrape(30.0, 80, 8), Scrape(45.0, 0, 8)]
    # avg_over_time(gauge[60s]) at 60: the scrapes at 15, 30 and 45 (0 is outside (0, 60])
    assert avg_over_time(scrapes, 60.0, 60.0) == {WAITING: 40.0, RUNNING: pytest.approx(20 / 3)}
    # at 30 with a 30 s window: 15 and 30
    assert avg_over_time(scrapes, 30.0, 30.0) == {WAITING: 60.0, RUNNING: 6.0}
    assert avg_over_time(scrapes, 200.0, 60.0) == {WAITING: 0.0, RUNNING: 0.0}
