"""Cron windows on the virtual clock: "from each ``schedule`` start, for ``duration`` seconds".

Simulated time is seconds since ``clock_start`` (a wall-clock instant, UTC); cron expressions
are read in UTC with croniter, or in the IANA time zone ``tz`` names (KEDA's cron trigger's
``timezone``: daylight saving moves the windows as it moves the zone's clocks).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

UTC_NAME = "UTC"


def _at(clock_start: datetime, t: float, tz: str = UTC_NAME) -> datetime:
    moment = clock_start + timedelta(seconds=t)
    return moment if tz == UTC_NAME else moment.astimezone(ZoneInfo(tz))


def is_zone(name: str) -> bool:
    """True for an IANA time zone name this machine knows (``Europe/Paris``, ``UTC``)."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def _seconds(clock_start: datetime, moment: datetime) -> float:
    return (moment - clock_start).total_seconds()


def is_valid(expression: str) -> bool:
    """True for a cron expression croniter accepts."""
    return bool(croniter.is_valid(expression))


def last_start(expression: str, t: float, clock_start: datetime, tz: str = UTC_NAME) -> float:
    """The latest window start at or before ``t`` (virtual seconds)."""
    probe = _at(clock_start, t, tz) + timedelta(microseconds=1)
    previous = croniter(expression, probe).get_prev(datetime)
    return _seconds(clock_start, previous)


def next_start(expression: str, t: float, clock_start: datetime, tz: str = UTC_NAME) -> float:
    """The first window start strictly after ``t``."""
    following = croniter(expression, _at(clock_start, t, tz)).get_next(datetime)
    return _seconds(clock_start, following)


def window_active(
    expression: str, duration: float, t: float, clock_start: datetime, tz: str = UTC_NAME
) -> bool:
    """True while a window opened by ``expression`` lasts (``duration`` seconds) at ``t``."""
    return t < last_start(expression, t, clock_start, tz) + duration


def next_change(expression: str, duration: float, t: float, clock_start: datetime) -> float:
    """When the window next opens or closes after ``t``."""
    start = last_start(expression, t, clock_start)
    times = [next_start(expression, t, clock_start)]
    if start + duration > t:
        times.append(start + duration)
    return min(times)
