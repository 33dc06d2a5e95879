"""fleetshare: fair sharing and right-sizing of shared accelerator clusters."""

__version__ = "0.1.0"
