"""The error an invalid policy raises (a module of its own, so that the command line can catch
it without importing the schema)."""

from __future__ import annotations


class PolicyError(ValueError):
    """An invalid policy; ``problems`` lists ``(field path, reason)`` pairs."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "policy") -> None:
        self.problems = problems
        lines = "\n".join(f"  {path}: {reason}" for path, reason in problems)
        super().__init__(f"invalid {source}:\n{lines}")
