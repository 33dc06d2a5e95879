"""The error an invalid policy raises (a module of its own, so that the command line can catch
it without importing the schema)."""

from __future__ import annotations


class PolicyError(ValueError):
    """An invalid policy; ``problems`` lists ``(field path, reason)`` pairs."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "policy") -> None:
        self.problems = problems
        self.source = source
        lines = "\n".join(f"  {path}: {reason}" for path, reason in problems)
        super().__init__(f"invalid {source}:\n{lines}")

    def __reduce__(self) -> tuple[type[PolicyError], tuple[list[tuple[str, str]], str]]:
        """Picklable with its own arguments (a worker process's error reaches the caller)."""
        return (type(self), (self.problems, self.source))
