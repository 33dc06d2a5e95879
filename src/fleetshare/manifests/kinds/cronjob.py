"""``batch/v1`` CronJob: not queued itself; each Job it creates is (Kueue manages them as
Jobs: ``spec.jobTemplate.metadata.labels`` must carry the queue name). Read here as one run:
the Job of its ``jobTemplate``, named after the CronJob."""

from __future__ import annotations

from typing import Any

from fleetshare.manifests.kinds.base import (
    Expansion,
    PodGroupKind,
    carried_annotations,
    check_api_version,
    governing_labels,
    spec_of,
)
from fleetshare.manifests.values import Fields


class CronJob(PodGroupKind):
    admission = "jobs"
    kind = "CronJob"
    api_versions = ("batch/v1",)
    plural = "cronjobs"
    crd = False
    summary = "each Job it creates, as a Job (one run is read)"

    def expand(self, fields: Fields, doc: dict[str, Any]) -> Expansion:
        check_api_version(fields, self, doc)
        spec = spec_of(fields, doc)
        template = fields.mapping(spec.get("jobTemplate"), "spec.jobTemplate", required=True)
        meta = fields.mapping(template.get("metadata"), "spec.jobTemplate.metadata")
        labels = fields.strings(meta.get("labels"), "spec.jobTemplate.metadata.labels")
        own = governing_labels(doc)
        if own and not governing_labels({"metadata": {"labels": labels}}):
            key = next(iter(own))
            raise fields.error(
                f"metadata.labels.{key}",
                "Kueue reads the queue name of a CronJob's Jobs from "
                "spec.jobTemplate.metadata.labels: put it there",
            )
        outer = doc.get("metadata") or {}
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": outer.get("name"),
                "namespace": outer.get("namespace") or "default",
                "labels": labels,
                "annotations": {**(meta.get("annotations") or {}), **carried_annotations(doc)},
            },
            "spec": fields.mapping(template.get("spec"), "spec.jobTemplate.spec", required=True),
        }
        note = (
            "spec.schedule: one run is read; each run is a Job Kueue queues on its own (give "
            "the runs as Jobs with their submit times to model several)"
        )
        return Expansion((job,), (note,))


CRONJOB = CronJob()
