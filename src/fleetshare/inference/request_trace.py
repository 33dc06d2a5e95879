"""Requests a service serves, each with its arrival and token counts: read from a file in the
format of a public LLM serving trace, or drawn from a rate pattern (pure but for reading).

* **Azure** (the Azure Public Dataset's LLM inference traces, 2023 and 2024): CSV with
  ``TIMESTAMP`` (``2023-11-16 18:15:46.6805900``), ``ContextTokens`` (prompt) and
  ``GeneratedTokens`` (output).
* **Mooncake** (kvcache-ai/Mooncake's FAST'25 traces): JSON lines with ``timestamp``
  (milliseconds), ``input_length`` and ``output_length`` (other keys, ``hash_ids``, ignored).

Arrivals are seconds from the first request. ``speedup`` divides them (a trace replayed
faster); ``copies`` superposes that many copies of the trace, each shifted by a seeded uniform
``[0, jitter_seconds)`` (more traffic of the same shape and token mix).

From a pattern: arrivals are a non-homogeneous Poisson process over the rate's steps (per
step, a Poisson count of ``rate x span`` requests at seeded uniform times within it); token
counts are pairs drawn with replacement from a mix (the bundled minute of the Azure
conversation trace keeps each request's prompt and output together), or from lognormal
distributions given by their median and sigma.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from fleetshare.inference.spec import RequestTraceSpec, TokenMixSpec
from fleetshare.inference.traffic import Traffic
from fleetshare.inputs import InputError, read_text

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

AZURE_CONV_2023 = Path(__file__).resolve().parent.parent / (
    "data/traces/azure-llm-2023/conv_first_minute.csv"
)
"""The bundled first minute of the Azure LLM inference trace 2023, conversation (its README)."""


AZURE_COLUMNS = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}


@dataclass(frozen=True)
class Requests:
    """Requests sorted by arrival: ``arrival`` seconds, ``prompt`` and ``output`` tokens."""

    arrival: FloatArray
    prompt: IntArray
    output: IntArray
    source: str = ""

    def __post_init__(self) -> None:
        n = self.arrival.size
        if self.prompt.size != n or self.output.size != n:
            raise ValueError("requests need as many token counts as arrivals")
        if n and np.any(np.diff(self.arrival) < 0):
            raise ValueError("requests must be sorted by arrival")
        if n and (np.any(self.prompt < 0) or np.any(self.output < 1)):
            raise ValueError("prompt tokens must be >= 0 and output tokens >= 1")

    def __len__(self) -> int:
        return int(self.arrival.size)

    def rates(self, step: float, end: float) -> Traffic:
        """Arrivals per second counted in ``step``-second bins over ``[0, end)``: the rate
        series the scaler's metric is computed from."""
        bins = int(np.ceil(end / step))
        counts = np.bincount(
            np.minimum((self.arrival // step).astype(np.int64), bins - 1), minlength=bins
        )[:bins]
        times = tuple(float(i * step) for i in range(bins))
        return Traffic(times, tuple(float(c) / step for c in counts), end, self.source)


def _sorted(arrival: FloatArray, prompt: IntArray, output: IntArray, source: str) -> Requests:
    order = np.argsort(arrival, kind="stable")
    return Requests(arrival[order], prompt[order], output[order], source)


def parse_azure(text: str, source: str) -> Requests:
    """An Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``)."""
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        missing = AZURE_COLUMNS - set(reader.fieldnames or [])
        if missing:
            raise InputError(source, f"has no column {', '.join(sorted(missing))}")
        rows = list(reader)
        stamps = np.array([row["TIMESTAMP"].strip() for row in rows], dtype="datetime64[us]")
        prompt = np.array([int(row["ContextTokens"]) for row in rows], dtype=np.int64)
        output = np.array([int(row["GeneratedTokens"]) for row in rows], dtype=np.int64)
    except InputError:
        raise
    except (ValueError, TypeError, AttributeError, csv.Error) as exc:
        raise InputError(source, f"not an Azure LLM trace row: {exc}") from None
    if not rows:
        raise InputError(source, "no requests")
    seconds = (stamps - stamps.min()).astype(np.float64) / 1e6
    return _valid(_sorted(seconds, prompt, output, source), source)


def parse_mooncake(text: str, source: str) -> Requests:
    """A Mooncake trace (JSON lines: ``timestamp`` ms, ``input_length``, ``output_length``)."""
    stamps, prompt, output = [], [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            stamps.append(float(row["timestamp"]) / 1000.0)
            prompt.append(int(row["input_length"]))
            output.append(int(row["output_length"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(source, f"line {number}: not a Mooncake trace line: {exc}") from None
    if not stamps:
        raise InputError(source, "no requests")
    arrival = np.array(stamps) - min(stamps)
    return _valid(
        _sorted(
            arrival, np.array(prompt, dtype=np.int64), np.array(output, dtype=np.int64), source
        ),
        source,
    )


def _valid(requests: Requests, source: str) -> Requests:
    if len(requests) == 0:
        raise InputError(source, "no requests")
    return requests


def replay(requests: Requests, speedup: float, copies: int, jitter: float, seed: int) -> Requests:
    """``requests`` replayed ``speedup`` times faster, ``copies`` times over (each copy
    shifted by a seeded uniform ``[0, jitter)``; the first copy too when ``copies`` > 1)."""
    if copies == 1:
        return Requests(
            requests.arrival / speedup, requests.prompt, requests.output, requests.source
        )
    rng = np.random.default_rng(seed)
    arrival = np.concatenate(
        [requests.arrival / speedup + rng.uniform(0.0, jitter) for _ in range(copies)]
    )
    return _sorted(
        arrival, np.tile(requests.prompt, copies), np.tile(requests.output, copies), requests.source
    )


def read_requests(spec: RequestTraceSpec, base: Path) -> Requests:
    """The requests of a trace file (relative to ``base``), replayed as ``spec`` says."""
    path = base / spec.file
    text = read_text(path)
    parsed = (
        parse_azure(text, str(path)) if spec.format == "azure" else parse_mooncake(text, str(path))
    )
    return replay(parsed, spec.speedup, spec.copies, spec.jitter_seconds, spec.seed)


def token_pairs(
    mix: TokenMixSpec, count: int, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """``count`` (prompt, output) pairs drawn from the mix."""
    if mix.mix == "azure-conv-2023":
        bundled = parse_azure(read_text(AZURE_CONV_2023), str(AZURE_CONV_2023))
        picks = rng.integers(0, len(bundled), size=count)
        return bundled.prompt[picks], bundled.output[picks]
    prompt = rng.lognormal(np.log(mix.prompt_median), mix.prompt_sigma, size=count)
    output = rng.lognormal(np.log(mix.output_median), mix.output_sigma, size=count)
    return (
        np.maximum(0, np.rint(prompt)).astype(np.int64),
        np.maximum(1, np.rint(output)).astype(np.int64),
    )


def from_pattern(traffic: Traffic, mix: TokenMixSpec) -> Requests:
    """Poisson arrivals following ``traffic``'s rate, token counts from ``mix`` (seeded by
    ``mix.seed``)."""
    rng = np.random.default_rng(mix.seed)
    chunks: list[FloatArray] = []
    for start, stop, rate in traffic.steps():
        n = int(rng.poisson(rate * (stop - start))) if rate > 0 else 0
        if n:
            chunks.append(np.sort(rng.uniform(start, stop, size=n)))
    arrival = np.concatenate(chunks) if chunks else np.zeros(0)
    prompt, output = token_pairs(mix, arrival.size, rng)
    return Requests(arrival, prompt, output, f"{traffic.source} (Poisson)")
