"""Load the Alibaba GPU cluster trace (cluster-trace-gpu-v2023, "openb") for GPU packing.

Files (see ``fleetshare/data/traces/README.md``): ``openb_node_list_gpu_node.csv`` (1,213 GPU nodes,
6,212 GPUs) and ``openb_pod_list_*.csv`` (``default`` is the full trace of 8,152 pods; the
others are samples stressing GPU sharing, GPU-model constraints or multi-GPU pods).

How the columns are read:

- Nodes: ``sn`` (name), ``cpu_milli``, ``memory_mib``, ``gpu`` (GPU count; ``num_gpu`` is
  accepted too) and ``model`` (GPU model; or ``gpu_type``). Every GPU has 1000 milli-GPU.
- Pods: ``cpu_milli``, ``memory_mib``, ``num_gpu``, ``gpu_milli`` and ``gpu_spec``.
  ``gpu_milli`` is the share of *each* requested GPU:

  - ``num_gpu >= 1`` and ``gpu_milli == 1000``: ``num_gpu`` whole GPUs;
  - ``num_gpu == 1`` and ``0 < gpu_milli < 1000``: that fraction of one GPU;
  - ``num_gpu == 0``: a CPU-only pod (its ``gpu_milli`` must be 0). It is placed like any
    pod (it takes CPU and memory on a GPU node), requests no GPU, so it does not advance the
    arrived GPU demand, and it is left out of the task distribution by default.

  Anything else (several fractional GPUs, ``gpu_milli`` above 1000 or 0 with GPUs) does not
  occur in the trace and raises ``ValueError``. ``gpu_spec`` lists the accepted GPU models
  separated by ``|``; empty means any model. ``qos``, ``pod_phase`` and the times are kept on
  :class:`TracePod` but play no part in packing; every pod is used whatever its phase (as in
  the FGD paper's experiments). Missing optional columns (some samples have no ``gpu_spec``
  or times) read as empty / unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fleetshare.inputs import InputError, read_text
from fleetshare.model.catalog import gpu_family, load_catalog
from fleetshare.placement.gpu_share import (
    GPU_MILLI,
    GpuCluster,
    GpuNode,
    PodShape,
    TaskDistribution,
)
from fleetshare.traces.common import cell, csv_rows, optional_cell

NODE_FILE = "openb_node_list_gpu_node.csv"
DEFAULT_POD_FILE = "openb_pod_list_default.csv"


@dataclass(frozen=True, slots=True)
class TracePod:
    """One pod of the trace: its shape plus the trace's bookkeeping columns."""

    name: str
    shape: PodShape
    qos: str = ""
    phase: str = ""
    creation_time: int | None = None
    deletion_time: int | None = None
    scheduled_time: int | None = None


def _int(
    source: str, row: tuple[int, dict[str, str]], *names: str, default: int | None = None
) -> int:
    """The first of ``names`` that has a value: a whole, non-negative number (checked)."""
    for name in names:
        if row[1].get(name, "").strip():
            return int(cell(source, row, name, whole=True))
    if default is None:
        raise InputError(source, f"row {row[0]}: {names[0]} is empty")
    return default


def _optional_int(source: str, row: tuple[int, dict[str, str]], name: str) -> int | None:
    value = optional_cell(source, row, name)
    return None if value is None else int(value)


def load_nodes(path: Path) -> list[GpuNode]:
    """The nodes of a node list CSV (checked: problems name the file, row and column)."""
    source = str(path)
    rows = csv_rows(source, read_text(path), ("sn", "cpu_milli", "memory_mib"))
    nodes = [
        GpuNode(
            name=row[1]["sn"],
            cpu_milli=_int(source, row, "cpu_milli"),
            memory_mib=_int(source, row, "memory_mib"),
            num_gpu=_int(source, row, "gpu", "num_gpu", default=0),
            gpu_model=(row[1].get("model") or row[1].get("gpu_type") or "").strip(),
        )
        for row in rows
    ]
    catalog = load_catalog()
    known: set[str] = set()
    for row, node in zip(rows, nodes, strict=True):
        if node.num_gpu > 0 and node.gpu_model and node.gpu_model not in known:
            try:
                gpu_family(catalog, node.gpu_model)  # the simulator prices nodes by it
            except ValueError as exc:
                raise InputError(source, f"row {row[0]}: model: {exc}") from None
            known.add(node.gpu_model)
    return nodes


def load_cluster(path: Path) -> GpuCluster:
    """A :class:`GpuCluster` of the nodes in a node list CSV, all free."""
    return GpuCluster(load_nodes(path))


def pod_shape(cpu_milli: int, memory_mib: int, num_gpu: int, gpu_milli: int, spec: str) -> PodShape:
    """The trace's (num_gpu, gpu_milli) encoding as a :class:`PodShape` (see module doc)."""
    models = PodShape.parse_gpu_spec(spec)
    if num_gpu == 0:
        if gpu_milli != 0:
            raise ValueError(f"gpu_milli={gpu_milli} without GPUs")
        return PodShape(cpu_milli, memory_mib)
    if gpu_milli == GPU_MILLI:
        return PodShape(cpu_milli, memory_mib, num_gpu=num_gpu, gpu_models=models)
    if num_gpu == 1 and 0 < gpu_milli < GPU_MILLI:
        return PodShape(cpu_milli, memory_mib, gpu_milli=gpu_milli, gpu_models=models)
    raise ValueError(f"unsupported GPU request num_gpu={num_gpu}, gpu_milli={gpu_milli}")


def load_pods(path: Path) -> list[TracePod]:
    """The pods of a pod list CSV, in file order (checked as :func:`load_nodes`)."""
    source = str(path)
    pods: list[TracePod] = []
    for row in csv_rows(source, read_text(path), ("name", "cpu_milli", "memory_mib")):
        values = row[1]
        try:
            shape = pod_shape(
                _int(source, row, "cpu_milli"),
                _int(source, row, "memory_mib"),
                _int(source, row, "num_gpu", default=0),
                _int(source, row, "gpu_milli", default=0),
                values.get("gpu_spec") or "",
            )
        except InputError:
            raise
        except ValueError as err:
            raise InputError(source, f"row {row[0]}: pod {values['name']}: {err}") from None
        pods.append(
            TracePod(
                name=values["name"],
                shape=shape,
                qos=values.get("qos") or "",
                phase=values.get("pod_phase") or "",
                creation_time=_optional_int(source, row, "creation_time"),
                deletion_time=_optional_int(source, row, "deletion_time"),
                scheduled_time=_optional_int(source, row, "scheduled_time"),
            )
        )
    return pods


def task_distribution(
    pods: Iterable[TracePod | PodShape], include_cpu_only: bool = False, coverage: float = 1.0
) -> TaskDistribution:
    """Popularity of the pods' shapes (see :meth:`TaskDistribution.from_pods`)."""
    shapes = (p.shape if isinstance(p, TracePod) else p for p in pods)
    return TaskDistribution.from_pods(shapes, include_cpu_only=include_cpu_only, coverage=coverage)
