"""Build the packaged EC2 instance-type catalog from the shared reference CSV.

Usage (from anywhere)::

    python scripts/build_catalog.py [SOURCE_CSV] [--out PATH]

SOURCE_CSV defaults to ``../shared/data/ec2/ec2_instance_types.csv`` relative to the repository
root; the output defaults to ``src/fleetshare/data/instance_types.csv``. The output keeps only
the columns the product needs, so the package does not read the shared folder at run time.

Instance types the reference lacks (HyperPod's ``ml.p6e-gb200.36xlarge`` and
``ml.trn2.3xlarge``) are added from ``scripts/catalog_supplements.csv``: hand-written rows of
hardware, each with its public source; their Kubernetes allocatable is derived here as
Karpenter derives it (:func:`allocatable_cpu`, :func:`allocatable_memory`), and a row the
reference also has is an error (the supplement is then obsolete). Standard library only, so it
runs before the package is installed.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections.abc import Iterable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO_ROOT / ".." / "shared" / "data" / "ec2" / "ec2_instance_types.csv"
DEFAULT_OUT = REPO_ROOT / "src" / "fleetshare" / "data" / "instance_types.csv"
SUPPLEMENTS = REPO_ROOT / "scripts" / "catalog_supplements.csv"
SOURCE_LABEL = "../shared/data/ec2/ec2_instance_types.csv"
SOURCE_COMMIT = "1d927085"

# output column -> source column
COLUMNS: dict[str, str] = {
    "name": "instance_type",
    "family": "family",
    "arch": "arch",
    "vcpu": "vcpu",
    "memory_mib": "memory_mib",
    "gpu_count": "gpu_count",
    "gpu_name": "gpu_name",
    "gpu_manufacturer": "gpu_manufacturer",
    "gpu_memory_mib": "gpu_memory_mib",
    "accelerator_count": "accelerator_count",
    "accelerator_name": "accelerator_name",
    "efa": "efa",
    "allocatable_cpu": "allocatable_cpu",
    "allocatable_memory": "allocatable_memory",
    "allocatable_pods": "allocatable_pods",
    "allocatable_nvidia_gpu": "allocatable_nvidia_gpu",
    "allocatable_neuron": "allocatable_neuron",
    "price": "on_demand_usd_per_hour_us_east_1",
}
REQUIRED = ("instance_type", "vcpu", "memory_mib", "allocatable_cpu", "allocatable_memory")
_NEURON_NAMES = ("trainium", "inferentia")


def _read(path: Path, columns: Iterable[str]) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = sorted(set(columns) - set(reader.fieldnames or ()))
        if missing:
            raise SystemExit(f"{path}: missing columns {', '.join(missing)}")
        return list(reader)


def allocatable_cpu(vcpu: int) -> str:
    """What the kubelet keeps of ``vcpu`` cores (Karpenter's kube-reserved CPU: 6% of the
    first core, 1% of the second, 0.5% of the next two, 0.25% of the rest)."""
    reserved = sum(60 if i == 0 else 10 if i == 1 else 5 if i < 4 else 2.5 for i in range(vcpu))
    return f"{int(vcpu * 1000 - reserved)}m"


def allocatable_memory(memory_mib: int, pods: int, arch: str) -> str:
    """What the kubelet keeps of ``memory_mib`` (Karpenter: 7.5% VM overhead, kube-reserved
    11 MiB a pod + 255 MiB, a 100 MiB eviction threshold; Arm nodes 59 MiB more)."""
    kept = memory_mib * 925 // 1000 - (11 * pods + 255) - 100 - (59 if arch == "arm64" else 0)
    return f"{kept}Mi"


def supplement_rows(path: Path = SUPPLEMENTS) -> list[dict[str, str]]:
    """The hand-added rows, in the reference's columns, their allocatable derived."""
    given = [c for c in COLUMNS.values() if not c.startswith("allocatable_")]
    rows = []
    for row in _read(path, [*given, "allocatable_pods", "source"]):
        if not row["source"].strip():
            raise SystemExit(f"{path}: {row['instance_type']}: no source")
        vcpu, pods = int(row["vcpu"]), int(row["allocatable_pods"])
        accelerator = row["accelerator_name"].strip().lower()
        neuron = row["accelerator_count"] if accelerator.startswith(_NEURON_NAMES) else "0"
        nvidia = row["gpu_count"] if row["gpu_manufacturer"].strip() == "nvidia" else "0"
        rows.append(
            row
            | {
                "allocatable_cpu": allocatable_cpu(vcpu),
                "allocatable_memory": allocatable_memory(int(row["memory_mib"]), pods, row["arch"]),
                "allocatable_nvidia_gpu": nvidia or "0",
                "allocatable_neuron": neuron or "0",
            }
        )
    return rows


def build(source: Path, supplements: Path = SUPPLEMENTS) -> str:
    """Return the compact catalog CSV text (header comment included) for ``source`` and the
    supplements."""
    rows = _read(source, COLUMNS.values())
    seen: set[str] = set()
    for line, row in enumerate(rows, start=2):
        for column in REQUIRED:
            if not row[column].strip():
                raise SystemExit(f"{source}:{line}: empty {column}")
        name = row["instance_type"]
        if name in seen:
            raise SystemExit(f"{source}:{line}: duplicate instance type {name}")
        seen.add(name)
    added = supplement_rows(supplements)
    for row in added:
        if row["instance_type"] in seen:
            raise SystemExit(
                f"{supplements}: {row['instance_type']} is in {source} now; remove the supplement"
            )

    out = io.StringIO()
    out.write(
        f"# generated by scripts/build_catalog.py from {SOURCE_LABEL} (karpenter-provider-aws "
        f"commit {SOURCE_COMMIT}) and scripts/{supplements.name}, do not edit\n"
    )
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in [*rows, *added]:
        writer.writerow(row[column].strip() for column in COLUMNS.values())
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not args.source.is_file():
        parser.error(f"source CSV not found: {args.source}")
    text = build(args.source)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8", newline="")
    rows = text.count("\n") - 2
    print(f"wrote {args.out} ({rows} instance types, {len(text.encode()) / 1024:.1f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
