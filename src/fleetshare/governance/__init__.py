"""Governance: admission, borrowing, preemption and fair share, as pure functions of a snapshot."""
