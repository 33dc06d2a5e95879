"""What an importer collects while mapping a foreign policy.

Every field of the input ends in one of three places, named by its path (``Kind/name.spec.x``,
list items as ``[i]``): *mapped* into the policy, *noted* (present, not carried over, with the
reason in ``Policy.notes``) or a *problem* (invalid: the import fails naming it). A path
recorded for a mapping or a list accounts for everything under it. :meth:`account` tells which
of the three holds a path, so tests can check that nothing in an input is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["mapped", "noted", "rejected"]


@dataclass
class ImportReport:
    """Notes (what could not be mapped), problems (why the input is invalid) and the paths of
    what was mapped."""

    notes: list[str] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    mapped: set[str] = field(default_factory=set)
    """Paths of fields carried into the policy."""
    noted: dict[str, str] = field(default_factory=dict)
    """Paths of fields not carried over, with the note's text."""

    def note(self, where: str, text: str, path: str | None = None) -> None:
        """Record something present in the input that fleetshare does not carry over
        (``path``: the field, when ``where`` shows more, such as its value)."""
        self.notes.append(f"{where}: {text}")
        self.noted.setdefault(path or where, text)

    def remark(self, where: str, text: str) -> None:
        """Record how something was mapped (a note about fields that are accounted for
        otherwise, so it accounts for none)."""
        self.notes.append(f"{where}: {text}")

    def problem(self, where: str, reason: str) -> None:
        """Record an invalid field and why."""
        self.problems.append((where, reason))

    def map(self, path: str) -> None:
        """Record a field carried into the policy."""
        self.mapped.add(path)

    def account(self, path: str) -> Outcome | None:
        """Where the field at ``path`` (or a field above it) went; None if nowhere."""
        rejected = {where for where, _ in self.problems}
        for prefix in _prefixes(path):
            if prefix in rejected:
                return "rejected"
            if prefix in self.mapped:
                return "mapped"
            if prefix in self.noted:
                return "noted"
        return None


def _prefixes(path: str) -> list[str]:
    """``a.b[0].c`` -> ``a.b[0].c``, ``a.b[0]``, ``a.b``, ``a`` (longest first)."""
    out = [path]
    end = len(path)
    while end > 0:
        cut = max(path.rfind(".", 0, end), path.rfind("[", 0, end))
        if cut <= 0:
            break
        end = cut
        out.append(path[:end])
    return out
