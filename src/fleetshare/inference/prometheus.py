"""A trigger's value from Prometheus (KEDA's ``prometheus`` scaler): a PromQL instant query
against the HTTP API (``GET /api/v1/query``), its result read as one number.

:func:`value_of` reads a response body (pure); :class:`PrometheusSource` sends the query
with httpx. Every failure is a :class:`MetricError` naming the server and the query:
unreachable server or timeout, an HTTP error status (with Prometheus' own error message when
it gives one), a body that is not the API's JSON, a vector of several elements, an empty
vector when ``ignore_null_values`` is off, and values that are not finite numbers.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import httpx

from fleetshare.inference.spec import PrometheusQuery


class MetricError(RuntimeError):
    """A trigger's value could not be read."""


class MetricSource(Protocol):
    """Where a live scaler reads one trigger's current value (the service's total)."""

    def read(self) -> float:
        """The value now; raises :class:`MetricError` when there is none."""
        ...


def _number(raw: Any, where: str) -> float:
    """A sample's value (``[timestamp, "value"]``) as a finite float."""
    if not isinstance(raw, list) or len(raw) != 2:
        raise MetricError(f"{where}: a sample is [timestamp, value], got {raw!r}")
    try:
        value = float(raw[1])
    except (TypeError, ValueError):
        raise MetricError(f"{where}: value {raw[1]!r} is not a number") from None
    if not math.isfinite(value):
        raise MetricError(f"{where}: value {raw[1]} is not a finite number")
    return value


def value_of(body: Any, query: PrometheusQuery) -> float:
    """The number an instant query's response ``body`` (parsed JSON) gives: a scalar's value,
    or the only element of a vector (an empty vector: 0 if ``ignore_null_values``)."""
    where = f"prometheus {query.server_address} query {query.query!r}"
    if not isinstance(body, dict):
        raise MetricError(f"{where}: response is not a JSON object")
    if body.get("status") != "success":
        detail = body.get("error") or body.get("status")
        raise MetricError(f"{where}: query failed: {detail}")
    data = body.get("data")
    if not isinstance(data, dict):
        raise MetricError(f"{where}: response has no data")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        return _number(result, where)
    if kind != "vector" or not isinstance(result, list):
        raise MetricError(f"{where}: result type {kind!r}; the query must give a scalar or vector")
    if not result:
        if query.ignore_null_values:
            return 0.0
        raise MetricError(f"{where}: empty result (no series matched; ignore_null_values is off)")
    if len(result) > 1:
        raise MetricError(
            f"{where}: {len(result)} series in the result; aggregate it to one (e.g. sum(...))"
        )
    sample = result[0]
    if not isinstance(sample, dict):
        raise MetricError(f"{where}: a vector element is not an object")
    return _number(sample.get("value"), where)


class PrometheusSource:
    """Reads one trigger from Prometheus with an instant query (``client``: an httpx client
    to reuse; by default one per source)."""

    def __init__(self, query: PrometheusQuery, client: httpx.Client | None = None) -> None:
        if query.server_address is None:
            raise ValueError(f"Prometheus server {query.server!r}: resolve its name first")
        self.query = query
        self.address: str = query.server_address
        self.client = client if client is not None else httpx.Client()

    def read(self) -> float:
        q = self.query
        where = f"prometheus {self.address} query {q.query!r}"
        url = self.address.rstrip("/") + "/api/v1/query"
        try:
            response = self.client.get(url, params={"query": q.query}, timeout=q.timeout_seconds)
        except httpx.TimeoutException:
            raise MetricError(f"{where}: no answer within {q.timeout_seconds:g} s") from None
        except httpx.HTTPError as exc:
            raise MetricError(f"{where}: {exc}") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code != 200:
            error = body.get("error") if isinstance(body, dict) else None
            raise MetricError(
                f"{where}: HTTP {response.status_code}: {error or response.text[:200]}"
            )
        if body is None:
            raise MetricError(f"{where}: response is not JSON")
        return value_of(body, q)
