"""``jobset.x-k8s.io/v1alpha2`` JobSet: one pod set per replicated job, ``replicas`` (default
1) times the job's pods (as for a Job); suspended at ``spec.suspend``; finished when its
``Completed`` or ``Failed`` condition is True."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleetshare.manifests.kinds.base import (
    KindPods,
    Path,
    RawPodSet,
    SuspendedKind,
    get,
    spec_of,
    true_condition,
)
from fleetshare.manifests.kinds.job import read_job_spec
from fleetshare.manifests.values import Fields, join


class JobSet(SuspendedKind):
    kind = "JobSet"
    api_versions = ("jobset.x-k8s.io/v1alpha2",)
    plural = "jobsets"
    summary = "one per replicated job: ``replicas`` (default 1) x the job's pods (as for a Job)"

    def read(self, fields: Fields, doc: dict[str, Any]) -> KindPods:
        spec = spec_of(fields, doc)
        path = "spec.replicatedJobs"
        jobs = fields.items(spec.get("replicatedJobs"), path, required=True)
        if not jobs:
            raise fields.error(path, "must list at least one replicated job")
        out: list[RawPodSet] = []
        notes: list[str] = []
        seen: set[str] = set()
        for i, item in enumerate(jobs):
            where = join(path, i)
            job = fields.mapping(item, where, required=True)
            name = fields.text(job.get("name"), join(where, "name"), required=True)
            assert name is not None
            if name in seen:
                raise fields.error(join(where, "name"), f"repeats {name!r}")
            seen.add(name)
            replicas = fields.whole(job.get("replicas"), join(where, "replicas"), default=1)
            template = fields.mapping(job.get("template"), join(where, "template"), required=True)
            job_spec = fields.mapping(
                template.get("spec"), join(where, "template.spec"), required=True
            )
            pods = read_job_spec(fields, job_spec, join(where, "template.spec"), name)
            (raw,) = pods.podsets
            out.append(RawPodSet(name, replicas * raw.count, raw.shape))
            notes.extend(pods.notes)
        return KindPods(tuple(out), tuple(notes))

    def selector_paths(self, obj: Mapping[str, Any]) -> dict[str, Path]:
        out: dict[str, Path] = {}
        for i, job in enumerate(get(obj, ("spec", "replicatedJobs")) or ()):
            if isinstance(job, Mapping) and job.get("name"):
                out[str(job["name"])] = ("spec", "replicatedJobs", i, "template", "spec",
                                         "template", "spec")  # fmt: skip
        return out

    def finished(self, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
        return true_condition(obj, ("Completed", "Failed"))


JOBSET = JobSet()
