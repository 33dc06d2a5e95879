"""Durations in annotations: seconds (``"5400"``, ``"90.5"``) or Go's duration syntax
(``"2h30m"``, ``"1.5h"``, ``"90s"``, ``"500ms"``), as ``time.ParseDuration`` reads it but
without a sign: a duration or a time offset is never negative."""

from __future__ import annotations

import math
import re

_SECONDS = re.compile(r"^(?:\d+(?:\.\d*)?|\.\d+)$")
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # Go accepts both micro signs
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
MAX_SECONDS = 10.0**12
"""The longest duration accepted (about 31,700 years): far beyond any simulation."""


def parse_duration(text: str) -> float:
    """Seconds in ``text``; ValueError saying what is accepted otherwise.

    >>> parse_duration("2h30m"), parse_duration("5400"), parse_duration("1.5m")
    (9000.0, 5400.0, 90.0)
    """
    value = text.strip()
    if _SECONDS.match(value):
        seconds = float(value)
    else:
        pos, seconds = 0, 0.0
        for match in _PART.finditer(value):
            if match.start() != pos:
                break
            seconds += float(match[1]) * _UNIT[match[2]]
            pos = match.end()
        if pos == 0 or pos != len(value):
            raise ValueError(
                f"not a duration: {text!r} (seconds such as 5400, or Go's form such as 2h30m, "
                "90m, 1.5h, 45s)"
            )
    if not math.isfinite(seconds) or seconds > MAX_SECONDS:
        raise ValueError(f"duration too long: {text!r}")
    return seconds
