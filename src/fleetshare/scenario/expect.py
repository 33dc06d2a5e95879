"""Check a run against a scenario's ``expect`` block: a partial match on the JSON output."""

from __future__ import annotations

from typing import Any


def mismatches(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where ``actual`` differs from ``expected``.

    Mappings match when every expected key matches (others are ignored); lists match
    element-wise and must have the same length; a string starting with ``~`` matches any
    string containing the rest; everything else must be equal.
    """
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path or '.'}: expected a mapping, got {actual!r}"]
        out = []
        for key, value in expected.items():
            where = f"{path}.{key}" if path else str(key)
            if key not in actual:
                out.append(f"{where}: missing")
            else:
                out.extend(mismatches(value, actual[key], where))
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: expected {len(expected)} items, got {actual!r}"]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            out.extend(mismatches(e, a, f"{path}[{i}]"))
        return out
    if isinstance(expected, str) and expected.startswith("~"):
        if isinstance(actual, str) and expected[1:] in actual:
            return []
        return [f"{path}: expected text containing {expected[1:]!r}, got {actual!r}"]
    if expected != actual:
        return [f"{path}: expected {expected!r}, got {actual!r}"]
    return []
