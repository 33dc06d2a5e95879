"""Process settings for a long-running ``fleetshare serve``.

Python's cyclic garbage collector walks every tracked object of the oldest generation in a
full collection, and by default runs one each time the long-lived heap has grown by a quarter:
while a service loads thousands of workloads (and the loop's state with them) that is a full
walk every few hundred milliseconds, which halved the loop's throughput at 5,000 workloads
(``bench/service_throughput.py``). :func:`tune_garbage_collector` moves what the process holds
after start-up (the loaded store, the modules) out of the collector's reach
(:func:`gc.freeze`) and collects the youngest generation every :data:`GC_YOUNG` allocations
instead of 700, the oldest one every :data:`GC_OLD` collections of the middle one. Memory held
by reference cycles is freed later, nothing else changes.
"""

from __future__ import annotations

import gc

GC_YOUNG = 50_000
GC_MIDDLE = 20
GC_OLD = 100


def tune_garbage_collector() -> None:
    """Freeze what is allocated now and raise the collection thresholds (module docstring)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, GC_MIDDLE, GC_OLD)
