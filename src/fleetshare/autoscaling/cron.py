"""Cron windows on the virtual clock: "from each ``schedule`` start, for ``duration`` seconds".

Simulated time is seconds since ``clock_start`` (a wall-clock instant, UTC); cron expressions
are read in UTC with croniter.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from croniter import croniter


def _at(clock_start: datetime, t: float) -> datetime:
    return clock_start + timedelta(seconds=t)


def _seconds(clock_start: datetime, moment: datetime) -> float:
    return (moment - clock_start).total_seconds()


def is_valid(expression: str) -> bool:
    """True for a cron expression croniter accepts."""
    return bool(croniter.is_valid(expression))


def last_start(expression: str, t: float, clock_start: datetime) -> float:
    """The latest window start at or before ``t`` (virtual seconds)."""
    probe = _at(clock_start, t) + timedelta(microseconds=1)
    previous = croniter(expression, probe).get_prev(datetime)
    return _seconds(clock_start, previous)


def next_start(expression: str, t: float, clock_start: datetime) -> float:
    """The first window start strictly after ``t``."""
    following = croniter(expression, _at(clock_start, t)).get_next(datetime)
    return _seconds(clock_start, following)


def window_active(expression: str, duration: float, t: float, clock_start: datetime) -> bool:
    """True while a window opened by ``expression`` lasts (``duration`` seconds) at ``t``."""
    return t < last_start(expression, t, clock_start) + duration


def next_change(expression: str, duration: float, t: float, clock_start: datetime) -> float:
    """When the window next opens or closes after ``t``."""
    start = last_start(expression, t, clock_start)
    times = [next_start(expression, t, clock_start)]
    if start + duration > t:
        times.append(start + duration)
    return min(times)
