"""The error a scenario that cannot be run raises (a module of its own, so that the command
line can catch it without importing the loader)."""

from __future__ import annotations


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message names the field and the reason."""
