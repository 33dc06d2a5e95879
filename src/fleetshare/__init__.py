"""fleetshare: fair sharing and right-sizing of shared accelerator clusters."""

import importlib
from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``fleetshare.simulate(...)`` and ``fleetshare.sweep(...)``, imported when first used (so
    that ``fleetshare --help`` loads neither pandas nor the simulator)."""
    if name == "simulate":
        return importlib.import_module("fleetshare.simulate")
    if name == "sweep":
        from fleetshare.simulate.api import sweep

        return sweep
    raise AttributeError(f"module 'fleetshare' has no attribute {name!r}")
