"""Charts of a services comparison: the trade-off (capacity-short minutes against extra
GPU-hours, per option) and each option's serving capacity against the traffic."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from fleetshare.simulate.service_compare import OptionResult, versus_reactive


def write_charts(out: Path, name: str, results: Sequence[OptionResult]) -> list[Path]:
    """``<name>-tradeoff.png`` and ``<name>-capacity.png`` in ``out``; their paths."""
    written = []
    relative = versus_reactive(results)
    if relative:
        fig, ax = plt.subplots(figsize=(6, 4))
        for option, row in relative.items():
            point = (row["extra_gpu_hours_percent"] or 0.0, row["capacity_short_minutes"] or 0.0)
            ax.scatter(*point)
            ax.annotate(option, point)
        ax.set_xlabel("extra GPU-hours vs reactive (%)")
        ax.set_ylabel("capacity-short minutes")
        ax.set_title(f"{name}: capacity options on the same traffic")
        ax.grid(alpha=0.3)
        path = out / f"{name}-tradeoff.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    services = sorted({s for r in results for s in r.curves})
    for service in services:
        fig, (whole, zoom) = plt.subplots(1, 2, figsize=(12, 4))
        first = next(r for r in results if service in r.curves)
        curve = first.curves[service]
        lo, hi = _busiest(curve["t"], curve["needed"])
        for ax, (a, b) in ((whole, (curve["t"][0], curve["t"][-1])), (zoom, (lo, hi))):
            keep = [i for i, t in enumerate(curve["t"]) if a <= t <= b]
            hours = [curve["t"][i] / 3600 for i in keep]
            ax.plot(hours, [curve["rps"][i] for i in keep], color="black", lw=1, label="traffic")
            ax.plot(
                hours,
                [curve["needed"][i] for i in keep],
                color="grey",
                lw=1,
                ls=":",
                label="perfect foresight",
            )
            for r in results:
                if service in r.curves:
                    values = r.curves[service]["capacity"]
                    ax.step(hours, [values[i] for i in keep], where="post", lw=1, label=r.option)
            ax.set_xlabel("hours")
            ax.set_ylabel("requests per second")
            ax.grid(alpha=0.3)
        whole.set_title(f"{name}: {service} serving capacity")
        zoom.set_title("the largest rise in demand")
        zoom.legend(fontsize=8)
        path = out / f"{name}-{service}-capacity.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def _busiest(times: list[float], needed: list[float]) -> tuple[float, float]:
    """A window around the largest rise of the needed capacity within 10 minutes."""
    best, at, span = -1.0, times[0], 40  # 40 samples of 15 s
    for i in range(len(times) - span):
        rise = needed[i + span] - needed[i]
        if rise > best:
            best, at = rise, times[i]
    return at - 600, at + 1800
