"""Where the command line writes, and how it looks on a terminal and in a pipe.

- A message (an error, a note, a progress line) is one line wherever it goes: it is never
  wrapped at a width, so a script that greps an error finds it whole; a terminal wraps it
  for the eye by itself.
- A table fits a terminal's width. Piped or redirected, it is as wide as its content: every
  column, no cell cut with "…" (``COLUMNS`` still sets a width when given).
"""

from __future__ import annotations

import os

from rich.console import Console

# Wider than any table the command line prints; a table is as wide as its content, never
# padded to the console's width, so this only stops cutting.
PIPED_WIDTH = 100_000


def stdout() -> Console:
    """The console for results (tables, summaries)."""
    return _console(stderr=False)


def stderr() -> Console:
    """The console for errors, notes and progress."""
    return _console(stderr=True)


def _console(stderr: bool) -> Console:
    console = Console(stderr=stderr, soft_wrap=True)
    if console.is_terminal or os.environ.get("COLUMNS", "").strip().isdigit():
        return console
    return Console(stderr=stderr, soft_wrap=True, width=PIPED_WIDTH)
