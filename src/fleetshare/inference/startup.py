"""Start-up of an inference replica from a documented table (pure): node launch to Ready per
instance family, image pull per way of getting the image, model load per model size and
where the weights are read from. Every figure names where it comes from; where no public
figure was found, the row says it is an assumption and how it was derived, so that a user
replaces it with a measurement of their own (``startup.image_pull_seconds`` /
``model_load_seconds`` and ``cloud.launch_latency_by_type`` take explicit values).
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetshare.inference.spec import StartupProfileSpec


@dataclass(frozen=True)
class Figure:
    """One start-up figure and its source."""

    seconds: float
    source: str


ISSUE_30 = (
    "fleetshare issue 30: public reports for an 8B model on g5 (node 150 s, image pull 180 s, "
    "model load 120 s) and 'several minutes' for 70B on p4d"
)

NODE_READY: dict[str, Figure] = {
    "g5": Figure(150, ISSUE_30),
    "g6": Figure(150, f"as g5 (same single-GPU layout and AMI); {ISSUE_30}"),
    "g6e": Figure(150, f"as g5 (same single-GPU layout and AMI); {ISSUE_30}"),
    "p4d": Figure(
        300,
        "assumption: twice g5 (8 GPUs, EFA and NVSwitch fabric to initialise); no public "
        "figure found here. Kubernetes' cluster-autoscaler notes a GPU node can take 'up to "
        "15 minutes' after Ready to report its GPUs allocatable (cluster-autoscaler/utils/gpu/"
        "gpu.go), an upper bound",
    ),
    "p5": Figure(300, "assumption: as p4d (see there)"),
}
"""Node launch to Ready (GPUs allocatable), by instance family."""

IMAGE_PULL: dict[str, Figure] = {
    "pull": Figure(
        180,
        f"{ISSUE_30}; AWS Machine Learning Blog, 'Reducing container cold start times using "
        "SOCI index on DLAMI and DLC': standard pulls of 15-20 GB deep-learning images take "
        "4-6 minutes per instance",
    ),
    "lazy": Figure(
        45,
        "assumption: a quarter of 'pull' -- Grab's engineering blog on lazy loading "
        "(SOCI / eStargz) reports about 4x faster image pulls on fresh nodes; AWS's SOCI post "
        "(above) starts containers with only the files they need",
    ),
    "preloaded": Figure(
        0,
        "the node boots with the image in its container store (GKE secondary boot disks; an "
        "EBS snapshot as Bottlerocket's data volume): no pull",
    ),
}
"""Image pull on a node that has not pulled the service's image, by how the image gets there."""

MODEL_LOAD: dict[tuple[str, str], Figure] = {
    ("8b", "local-disk"): Figure(120, ISSUE_30),
    ("8b", "object-storage"): Figure(
        150,
        "assumption: 'local-disk' plus 16 GB of bf16 weights at about 0.5 GB/s from object "
        "storage (30 s); vLLM streams safetensors from S3/GCS with the Run:ai Model Streamer "
        "(docs.vllm.ai, 'Loading models with Run:ai Model Streamer'), which can be faster",
    ),
    ("70b", "local-disk"): Figure(
        300,
        f"{ISSUE_30}; a 35B model read from local NVMe spent ~142 s loading weights and "
        "~39 s in torch.compile on one node (route179.dev, 'Optimizing vLLM cold start with "
        "model streaming and compile caching', 2026)",
    ),
    ("70b", "object-storage"): Figure(
        580,
        "assumption: 'local-disk' plus 140 GB of bf16 weights at about 0.5 GB/s (280 s)",
    ),
}
"""Model load (weights into GPU memory, engine start-up), by model size and weights source."""


@dataclass(frozen=True)
class Startup:
    """A replica's start-up looked up in the table, with the sources."""

    image_pull_seconds: float
    model_load_seconds: float
    sources: tuple[str, ...]


def from_table(profile: StartupProfileSpec) -> Startup:
    """The image pull and model load of ``profile`` (node launch is per instance type:
    :func:`node_ready`)."""
    pull = IMAGE_PULL[profile.image]
    load = MODEL_LOAD[(profile.model_size, profile.weights)]
    return Startup(
        pull.seconds,
        load.seconds,
        (f"image pull ({profile.image}): {pull.source}", f"model load: {load.source}"),
    )


def node_ready(family: str) -> Figure | None:
    """Node launch to Ready for an instance family (None when the table has no row)."""
    return NODE_READY.get(family)
