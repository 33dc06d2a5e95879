"""The request-level serving model and its SLO figures, on cases worked out by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fleetshare.inference.request_trace import (
    Requests,
    from_pattern,
    parse_azure,
    parse_mooncake,
    read_requests,
    replay,
)
from fleetshare.inference.serving import serve, slo_report, violation_windows
from fleetshare.inference.spec import RequestTraceSpec, ServingSpec, SloSpec, TokenMixSpec
from fleetshare.inference.traffic import Traffic, observed_rate
from fleetshare.inputs import InputError


def _requests(*rows: tuple[float, int, int]) -> Requests:
    return Requests(
        np.array([r[0] for r in rows], dtype=np.float64),
        np.array([r[1] for r in rows], dtype=np.int64),
        np.array([r[2] for r in rows], dtype=np.int64),
    )


SPEC = ServingSpec(
    prefill_tokens_per_second=1000,
    decode_seconds_per_token=0.02,
    decode_seconds_per_sequence=0.01,
    max_sequences=2,
)


def test_three_requests_on_one_replica_by_hand() -> None:
    # r1 at 0 s: prefill 1000 tokens = 1.0 s -> first token 1.0; alone in the batch: 100
    #   more tokens x 0.02 s -> last token 3.0.
    # r2 at 0.5 s: waits for the prefill engine (busy to 1.0); prefill 0.5 s -> 1.5; r1 is
    #   still decoding (until 3.0): batch 2, 0.02 + 0.01 = 0.03 s a token, 5 tokens -> 1.65.
    # r3 at 1.0 s: both slots busy (r1 to 3.0, r2 to 1.65): starts at 1.65; prefill 2 s ->
    #   3.65; r1 is done by then: batch 1, 1 token x 0.02 -> 3.67.
    req = _requests((0.0, 1000, 101), (0.5, 500, 6), (1.0, 2000, 2))
    served = serve(req, [(0.0, 100.0)], SPEC, horizon=100.0)
    assert served.start.tolist() == pytest.approx([0.0, 1.0, 1.65])
    assert served.ttft().tolist() == pytest.approx([1.0, 1.0, 2.65])
    assert served.tpot().tolist() == pytest.approx([0.02, 0.03, 0.02])
    assert served.e2e().tolist() == pytest.approx([3.0, 1.15, 2.67])


def test_the_first_request_after_scale_to_zero_waits_for_the_replica() -> None:
    # no replica until 90 s (node launch, pull, load); the request at 10 s waits 80 s
    req = _requests((10.0, 500, 1), (95.0, 500, 1))
    served = serve(req, [(90.0, 200.0)], SPEC, horizon=200.0)
    assert served.wait().tolist() == pytest.approx([80.0, 0.0])
    assert served.ttft().tolist() == pytest.approx([80.5, 0.5])
    serving_at_arrival = np.array([0, 1])
    slo = SloSpec(ttft_seconds=2.0)
    report = slo_report(served, slo, serving_at_arrival, 0.0, 200.0)
    assert report.cold_start_requests == 1
    assert report.cold_start_wait["max"] == pytest.approx(80.0)
    assert report.missed == 1 and report.missed_share == pytest.approx(0.5)
    # the minute [0, 60) holds the late request (p99 of one value = 80.5 > 2): 1 minute;
    # [60, 120) holds the second, on time
    assert report.violation_minutes == pytest.approx(1.0)
    assert (report.waiting_at_start, report.oldest_wait_at_start) == (0, 0.0)


def test_the_backlog_carried_into_a_window_by_hand() -> None:
    # one replica from 90 s (a cold start): the requests at 10 s and 30 s wait for it; the
    # one at 95 s starts on arrival (the replica's second slot)
    req = _requests((10.0, 500, 1), (30.0, 500, 1), (95.0, 500, 1))
    served = serve(req, [(90.0, 200.0)], SPEC, horizon=200.0)
    slo = SloSpec(ttft_seconds=2.0)
    at_60 = slo_report(served, slo, np.array([0, 0, 1]), 60.0, 200.0)
    # at 60 s both early requests wait, the oldest for 50 s: a backlog carried in
    assert (at_60.waiting_at_start, at_60.oldest_wait_at_start) == (2, 50.0)
    at_100 = slo_report(served, slo, np.array([0, 0, 1]), 100.0, 200.0)
    assert (at_100.waiting_at_start, at_100.oldest_wait_at_start) == (0, 0.0)


def test_requests_no_replica_starts_are_unserved_and_censored() -> None:
    req = _requests((5.0, 100, 1), (50.0, 100, 1))
    served = serve(req, [(0.0, 10.0)], SPEC, horizon=60.0)
    # the first is served at once; the replica stops at 10: the second never starts
    assert served.unserved.tolist() == [False, True]
    assert served.ttft().tolist() == pytest.approx([0.1, 10.0])  # 60 - 50, censored
    assert np.isnan(served.e2e()[1])


def test_the_queue_carries_over_and_spreads_over_replicas() -> None:
    # one slot a replica, 1 s of prefill each; two replicas from 0, four requests at 0:
    # two start at 0 (one a replica), two at 1
    one = ServingSpec(prefill_tokens_per_second=100, decode_seconds_per_token=0.1, max_sequences=1)
    req = _requests(*[(0.0, 100, 1)] * 4)
    served = serve(req, [(0.0, 50.0), (0.0, 50.0)], one, horizon=50.0)
    assert sorted(served.start.tolist()) == [0.0, 0.0, 1.0, 1.0]


def test_a_violation_minute_is_judged_on_its_percentile() -> None:
    # 100 requests in [0, 60): one with a TTFT of 5 s, the others 0.1 s. The nearest-rank
    # p99 of 100 values is the 99th smallest: 0.1 -> no violation; with p100 it is 5.
    n = 100
    req = _requests(*[(i * 0.5, 100, 1) for i in range(n)])
    served = serve(
        req,
        [(0.0, 1000.0)],
        ServingSpec(prefill_tokens_per_second=1000, decode_seconds_per_token=0.01, max_sequences=4),
        horizon=1000.0,
    )
    ttft = served.ttft()
    assert ttft == pytest.approx(np.full(n, 0.1))
    late = _requests(*[(i * 0.5, 100 if i else 5000, 1) for i in range(n)])
    served = serve(
        late,
        [(0.0, 1000.0)],
        ServingSpec(prefill_tokens_per_second=1000, decode_seconds_per_token=0.01, max_sequences=4),
        horizon=1000.0,
    )
    # the 5000-token prompt holds the prefill engine for 5 s: requests at 0.5..4.5 s wait
    assert served.ttft()[0] == pytest.approx(5.0)
    assert violation_windows(served, SloSpec(ttft_seconds=1.0, percentile=50), 0.0, 60.0) == 0.0
    assert violation_windows(served, SloSpec(ttft_seconds=1.0, percentile=99), 0.0, 60.0) == 60.0


AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.2224670,879,55
"""


def test_azure_and_mooncake_formats() -> None:
    az = parse_azure(AZURE, "t.csv")
    assert az.arrival.tolist() == pytest.approx([0.0, 4.314579, 4.541877])
    assert az.prompt.tolist() == [374, 396, 879] and az.output.tolist() == [44, 109, 55]
    mc = parse_mooncake(
        '{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [1]}\n'
        '{"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": [2]}\n',
        "t.jsonl",
    )
    assert mc.arrival.tolist() == pytest.approx([0.0, 3.053])
    assert mc.prompt.tolist() == [6955, 6472]
    with pytest.raises(InputError, match="no column"):
        parse_azure("time,a\n1,2\n", "bad.csv")
    with pytest.raises(InputError, match="line 1"):
        parse_mooncake('{"timestamp": 1}\n', "bad.jsonl")


def test_the_bundled_azure_minute_reads_and_replays(tmp_path: Path) -> None:
    from fleetshare.inference.request_trace import AZURE_CONV_2023

    (tmp_path / "t.csv").write_text(AZURE_CONV_2023.read_text())  # shipped in the package
    req = read_requests(RequestTraceSpec(file="t.csv"), tmp_path)
    assert len(req) == 191
    assert float(req.arrival[-1]) == pytest.approx(59.99352)  # 18:16:46.67411 - 18:15:46.68059
    fast = replay(req, speedup=2, copies=3, jitter=10, seed=1)
    assert len(fast) == 573 and float(fast.arrival.max()) < 30 + 10


def test_poisson_requests_follow_the_rate_and_night_may_be_empty() -> None:
    traffic = Traffic((0.0, 100.0), (0.0, 5.0), 1100.0)
    req = from_pattern(traffic, TokenMixSpec(seed=3))
    assert not (req.arrival < 100).any()  # no request at a rate of zero
    assert abs(len(req) - 5000) < 4 * np.sqrt(5000)  # Poisson(5000): within 4 sd
    again = from_pattern(traffic, TokenMixSpec(seed=3))
    assert np.array_equal(req.arrival, again.arrival)  # seeded
    lognormal = from_pattern(traffic, TokenMixSpec(mix="lognormal", prompt_sigma=0, output_sigma=0))
    assert set(lognormal.prompt.tolist()) == {1000} and set(lognormal.output.tolist()) == {200}


def test_binned_rates_of_requests() -> None:
    req = _requests((0.2, 1, 1), (0.7, 1, 1), (2.5, 1, 1))
    t = req.rates(1.0, 3.0)
    assert t.rates == (2.0, 0.0, 1.0)


def test_the_windowed_rate_lags_a_step() -> None:
    # 10 rps until 100 s, then 40 rps; scrapes every 15 s, rate over 60 s
    t = Traffic((0.0, 100.0), (10.0, 40.0), 1000.0)
    assert observed_rate(t, 100.0, 60, 15) == pytest.approx(10.0)  # scrapes 45..90: all 10
    # at 105: scrapes 60..105 -> (10x100 + 40x5) - 600 = 600 over 45 s
    assert observed_rate(t, 105.0, 60, 15) == pytest.approx(600 / 45)
    assert observed_rate(t, 160.0, 60, 15) == pytest.approx(40.0)  # scrapes 105..150
    assert observed_rate(t, 10.0, 60, 15) == 0.0  # one scrape only (at 0): no rate yet


def test_startup_from_the_table_names_its_sources() -> None:
    from fleetshare.inference.spec import StartupProfileSpec, StartupSpec
    from fleetshare.inference.startup import IMAGE_PULL, MODEL_LOAD, NODE_READY, from_table

    got = from_table(StartupProfileSpec(model_size="8b", image="lazy", weights="local-disk"))
    assert (got.image_pull_seconds, got.model_load_seconds) == (45, 120)
    assert all(f.source for f in (*NODE_READY.values(), *IMAGE_PULL.values(), *MODEL_LOAD.values()))
    with pytest.raises(ValueError, match="not both"):
        StartupSpec.model_validate({"profile": {"model_size": "8b"}, "model_load_seconds": 5})


def test_nearest_rank_by_hand() -> None:
    from fleetshare.model.stats import nearest_rank

    values = np.arange(1.0, 101.0)  # 1..100
    assert nearest_rank(values, 99) == 99.0  # ceil(0.99 x 100) = 99th smallest
    assert nearest_rank(values, 50) == 50.0
    assert nearest_rank(np.array([0.1, np.inf]), 99) == np.inf  # 2nd of 2
    assert nearest_rank(np.array([]), 99) is None
