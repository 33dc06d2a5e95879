"""GPU-hours of a node pool shared by a service and training, against the service on a
dedicated pool beside a dedicated training pool (pure; definitions in docs/inference.md,
"A pool shared with training").

The shared run's training holds ``training_gpus`` GPUs whenever no replica has taken them
(a queue that always has work). The dedicated world it is compared with runs the same
service reactively on a pool of its own (``reactive``'s paid GPU-hours, all of them the
service's) and the same training on ``training_gpus`` GPUs of a pool of its own, never
preempted: all of its GPU-hours are useful.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

USEFUL = {
    "aligned": "useful_gpu_hours",
    "independent": "useful_gpu_hours_independent_phases",
}
"""Which training output the useful GPU-hours come from: checkpoints counted from each job's
first placement in the run (``aligned``: jobs placed together checkpoint together), or each
job's first loss at half a checkpoint interval (``independent`` phases, expected)."""


@dataclass(frozen=True)
class Ledger:
    """One shared run against the dedicated world, in GPU-hours over the same window."""

    cluster: float
    """The shared pool's paid GPU-hours."""
    training_useful: float
    """Training run minus training lost (work since the last checkpoint, run again), the
    checkpoints' phases as :data:`USEFUL` says."""
    net_inference: float
    """``cluster - training_useful``: every paid GPU-hour that did no lasting training
    (replicas, their start-up, idle spare, lost work) is charged to the service."""
    replica_held: float
    """GPU-hours held by the service's replicas (placed: start-up and serving)."""
    dedicated_cluster: float
    """The dedicated world: the service's pool plus ``training_gpus`` x the window."""
    dedicated_training: float
    """``training_gpus`` x the window: the dedicated training pool, all useful."""
    dedicated_inference: float
    """The service's dedicated pool (reactive's paid GPU-hours)."""

    @property
    def extra_net_inference_percent(self) -> float:
        """Net inference GPU-hours against the dedicated pool's, in percent."""
        return 100 * (self.net_inference / self.dedicated_inference - 1)

    @property
    def extra_cluster_percent(self) -> float:
        """The shared pool's GPU-hours against the dedicated world's, in percent."""
        return 100 * (self.cluster / self.dedicated_cluster - 1)


def ledger(
    shared: dict[str, Any],
    reactive: dict[str, Any],
    training_gpus: float,
    phases: Literal["aligned", "independent"] = "independent",
) -> Ledger:
    """The ledger of a shared run (``shared``: its ``services`` and ``cluster`` output, one
    service whose headroom training holds) against ``reactive`` (the service alone on a
    dedicated pool, same window), the training's useful GPU-hours as ``phases`` says."""
    cluster = shared["cluster"]
    (service,) = shared["services"].values()
    start, end = cluster["window_seconds"]
    dedicated_training = training_gpus * (end - start) / 3600
    paid = cluster["gpu_hours"]
    useful = service["training"][USEFUL[phases]]
    inference = reactive["cluster"]["gpu_hours"]
    return Ledger(
        cluster=paid,
        training_useful=useful,
        net_inference=round(paid - useful, 2),
        replica_held=cluster["inference_gpu_hours"],
        dedicated_cluster=round(inference + dedicated_training, 2),
        dedicated_training=round(dedicated_training, 2),
        dedicated_inference=inference,
    )


@dataclass(frozen=True)
class NetExtra:
    """A shared run's net inference GPU-hours beyond reactive's pool, in its parts (each
    the shared run's figure less reactive's where reactive has one); they add up to
    ``net_inference - reactive's pool GPU-h`` (to the outputs' rounding)."""

    replicas: float
    """Replica-held GPU-h beyond reactive's replica-held GPU-h."""
    launching: float
    """Idle GPU-h of nodes launching (for replicas or for the training), beyond reactive's."""
    waiting_for_a_gang: float
    """Idle GPU-h of Ready nodes kept for a training job that waits for the rest of its
    gang's nodes."""
    empty: float
    """Idle GPU-h of empty Ready nodes (until consolidation), beyond reactive's."""
    lost: float
    """Training work lost (run again), the checkpoints' phases as :data:`USEFUL` says."""
    delayed: float
    """Beside the sum, not in it: GPU-h the training waited to run again (its own cost in
    time; the pool's part of it is the idle above)."""

    @property
    def total(self) -> float:
        return self.replicas + self.launching + self.waiting_for_a_gang + self.empty + self.lost


def net_extra(
    shared: dict[str, Any],
    reactive: dict[str, Any],
    phases: Literal["aligned", "independent"] = "independent",
) -> NetExtra:
    """The parts of a shared run's net extra (``shared``: its ``services`` and ``cluster``
    output, one service whose headroom training holds) against ``reactive`` (the service
    alone on a dedicated pool, same window): net - reactive's pool = (held - reactive's
    held) + (idle - reactive's idle) + lost, where idle = pool - held - training run."""
    (service,) = shared["services"].values()
    training = service["training"]
    idle, base = shared["cluster"]["idle_split_gpu_hours"], reactive["cluster"]
    base_idle = base["idle_split_gpu_hours"]
    lost = training["gpu_hours"] - training[USEFUL[phases]]

    def beyond(*keys: str) -> float:
        return round(sum(float(idle[k]) - float(base_idle[k]) for k in keys), 2)

    return NetExtra(
        replicas=round(shared["cluster"]["inference_gpu_hours"] - base["inference_gpu_hours"], 2),
        launching=beyond("launching_for_replicas", "launching_for_headroom"),
        waiting_for_a_gang=beyond("waiting_for_a_gang"),
        empty=beyond("empty"),
        lost=round(lost, 2),
        delayed=training["delayed_gpu_hours"],
    )
