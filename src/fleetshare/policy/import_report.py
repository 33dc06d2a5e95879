"""What an importer collects while mapping a foreign policy."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ImportReport:
    """Notes (what could not be mapped) and problems (why the input is invalid)."""

    notes: list[str] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)

    def note(self, where: str, text: str) -> None:
        """Record something present in the input that fleetshare does not carry over."""
        self.notes.append(f"{where}: {text}")

    def problem(self, where: str, reason: str) -> None:
        """Record an invalid field and why."""
        self.problems.append((where, reason))
