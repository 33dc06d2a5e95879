"""A live scaler's triggers from Prometheus: the instant query's result read (hand-built
bodies), HTTP failures, and a real Prometheus (Debian's package) scraping a counter this test
controls, whose rate drives the replicas."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from fleetshare.inference.live import LiveScaler, prometheus_sources
from fleetshare.inference.prometheus import MetricError, PrometheusSource, value_of
from fleetshare.inference.spec import PrometheusQuery, ScalerSpec
from tests.prometheus_server import Counter

QUERY = PrometheusQuery(server_address="http://prom:9090", query="sum(rate(x[1m]))")


def _vector(*values: str) -> dict[str, Any]:
    result = [{"metric": {"i": str(i)}, "value": [1.0, v]} for i, v in enumerate(values)]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_a_vector_of_one_or_a_scalar_is_the_value() -> None:
    assert value_of(_vector("12.5"), QUERY) == 12.5
    scalar = {"status": "success", "data": {"resultType": "scalar", "result": [1.0, "3"]}}
    assert value_of(scalar, QUERY) == 3.0


def test_an_empty_result_reads_zero_only_when_null_values_are_ignored() -> None:
    assert value_of(_vector(), QUERY) == 0.0  # KEDA's default: ignoreNullValues true
    strict = QUERY.model_copy(update={"ignore_null_values": False})
    with pytest.raises(MetricError, match=r"query 'sum\(rate\(x\[1m\]\)\)': empty result"):
        value_of(_vector(), strict)


def test_bad_results_are_clear_errors() -> None:
    with pytest.raises(MetricError, match="2 series in the result; aggregate"):
        value_of(_vector("1", "2"), QUERY)
    with pytest.raises(MetricError, match="value 'abc' is not a number"):
        value_of(_vector("abc"), QUERY)
    with pytest.raises(MetricError, match="value NaN is not a finite number"):
        value_of(_vector("NaN"), QUERY)
    with pytest.raises(MetricError, match="result type 'matrix'"):
        value_of({"status": "success", "data": {"resultType": "matrix", "result": []}}, QUERY)
    with pytest.raises(MetricError, match="query failed: parse error"):
        value_of({"status": "error", "error": "parse error"}, QUERY)


def _source(handler: Any) -> PrometheusSource:
    return PrometheusSource(QUERY, httpx.Client(transport=httpx.MockTransport(handler)))


def test_http_errors_and_timeouts_name_the_server_and_query() -> None:
    def bad_query(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/query"
        assert request.url.params["query"] == QUERY.query
        return httpx.Response(400, json={"status": "error", "error": "bad_data: parse error"})

    with pytest.raises(MetricError, match=r"prom:9090 .*: HTTP 400: bad_data: parse error"):
        _source(bad_query).read()

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(MetricError, match="no answer within 5 s"):
        _source(slow).read()
    with pytest.raises(MetricError, match="HTTP 502: gateway"):
        _source(lambda r: httpx.Response(502, text="gateway")).read()
    with pytest.raises(MetricError, match="not JSON"):
        _source(lambda r: httpx.Response(200, text="<html>")).read()


def test_every_trigger_of_a_live_scaler_needs_a_query() -> None:
    spec = ScalerSpec.model_validate({"triggers": [{"metric": "rps", "target": 7}]})
    with pytest.raises(ValueError, match=r"triggers\[0\]\.prometheus"):
        prometheus_sources(spec)


# -- a real Prometheus (the fixture: tests/prometheus_server.py) --------------------------


def _settle(scaler: LiveScaler, expected: float) -> float:
    """Read until the query gives ``expected`` within 5% (Prometheus needs a few scrapes)."""
    deadline = time.monotonic() + 30
    value = -1.0
    while time.monotonic() < deadline:
        try:
            value = scaler.readings()[0].value
        except MetricError:  # no scrape yet: no series
            value = -1.0
        if abs(value - expected) <= 0.05 * expected:
            return value
        time.sleep(0.5)
    raise AssertionError(f"the query never gave {expected}: last {value}")


def test_a_prometheus_rate_drives_the_replicas(prometheus: tuple[str, Counter]) -> None:
    address, counter = prometheus
    spec = ScalerSpec.model_validate(
        {
            "min_replicas": 1,
            "max_replicas": 20,
            "triggers": [
                {
                    "metric": "rps",
                    "target": 7,
                    "prometheus": {
                        "server_address": address,
                        "query": "sum(rate(chat_requests_total[4s]))",
                        "ignore_null_values": False,
                    },
                }
            ],
        }
    )
    scaler = LiveScaler(spec, prometheus_sources(spec))
    counter.set_rate(17.5)  # rates mid-way between replica counts: a scrape's jitter moves none
    _settle(scaler, 17.5)
    assert scaler.tick(0).replicas == 1  # from zero: the minimum first (KEDA)
    assert scaler.tick(15).replicas == 3  # ceil(17.5 / 7)
    counter.set_rate(66.5)
    _settle(scaler, 66.5)
    decision = scaler.tick(30)
    assert decision.replicas == 7  # ceil(66.5 / 7) = 10, but at most +4 pods per 15 s from 3
    assert "rate-limited" in decision.why
    assert scaler.tick(45).replicas == 10
    strict = PrometheusQuery(
        server_address=address, query="sum(rate(no_such_metric[4s]))", ignore_null_values=False
    )
    with pytest.raises(MetricError, match="empty result"):
        PrometheusSource(strict).read()
    with pytest.raises(MetricError, match=r"HTTP 400: .*parse error"):
        PrometheusSource(strict.model_copy(update={"query": "sum(("})).read()
