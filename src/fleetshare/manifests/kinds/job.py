"""``batch/v1`` Job: one pod set ``main`` of ``parallelism`` pods (default 1), at most
``completions``, and, with the annotation ``kueue.x-k8s.io/job-min-parallelism``, as few as
that under partial admission (admitted with fewer, it runs with ``parallelism`` set to the
count admitted, restored on eviction); suspended at ``spec.suspend``; finished when Complete
or Failed, or as soon as its pods have succeeded (:func:`job_pods_succeeded`, before the
controller says so)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleetshare.manifests.kinds.base import (
    KindPods,
    Ops,
    Path,
    RawPodSet,
    SuspendedKind,
    deadline_notes,
    set_ops,
    spec_of,
    true_condition,
)
from fleetshare.manifests.pods import read_template
from fleetshare.manifests.values import Fields, join

MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
"""Partial admission: the fewest pods the Job accepts to run with (Kueue's PodSet minCount)."""
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
"""The annotation (and label) giving an Indexed Job's pod its completion index."""


def job_pods(fields: Fields, spec: Mapping[str, Any], path: str) -> int:
    """Pods a Job spec at ``path`` runs at once: parallelism, capped by completions."""
    parallelism = fields.whole(spec.get("parallelism"), join(path, "parallelism"), default=1)
    completions = spec.get("completions")
    pods = parallelism
    if completions is not None:
        pods = min(pods, fields.whole(completions, join(path, "completions"), default=1))
    if pods == 0:
        what = "parallelism" if parallelism == 0 else "completions"
        raise fields.error(join(path, what), "is 0: the job runs no pods")
    return pods


def read_job_spec(
    fields: Fields, spec: Mapping[str, Any], path: str, name: str, least: str | None = None
) -> KindPods:
    """A Job spec at ``path`` as the pod set ``name``; ``least``: the value of the Job's
    job-min-parallelism annotation, if it has one (:func:`min_parallelism`)."""
    pods = job_pods(fields, spec, path)
    shape = read_template(fields, spec.get("template"), join(path, "template"))
    fewest = None if least is None else min_parallelism(fields, least, pods)
    return KindPods((RawPodSet(name, pods, shape, fewest),), tuple(deadline_notes(spec, path)))


def min_parallelism(fields: Fields, text: str, pods: int) -> int:
    """The job-min-parallelism annotation's value: a whole number of pods, "greater than 0 and
    less than" the Job's pods (Kueue's tasks/run/jobs; its webhook refuses the Job else)."""
    where = join("metadata.annotations", MIN_PARALLELISM)
    if not text.isdigit():
        raise fields.error(where, f"must be a whole number of pods, got {text!r}")
    least = int(text)
    if not 0 < least < pods:
        raise fields.error(
            where, f"must be greater than 0 and less than the Job's {pods} pods, got {least}"
        )
    return least


def job_pods_succeeded(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """A batch/v1 Job's work is done by its pods' account, whatever its conditions say yet:
    its successes reach ``spec.completions`` (successes: the Job's ``status.succeeded`` plus
    the successes it has not counted yet, or its pods in phase ``Succeeded``, whichever is
    more; an Indexed Job counts distinct completion indexes); without ``completions``, a pod
    succeeded and every pod has terminated (the Job controller's own rule). ``pods`` are
    the Job's own. Everything read lives in the API server, so a restart decides alike."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    completions = spec.get("completions")
    succeeded = [p for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"]
    counted = int(status.get("succeeded") or 0)
    if spec.get("completionMode") == "Indexed":
        distinct = len({_pod_index(p) for p in succeeded} - {None})
    else:
        distinct = len({_pod_id(p) for p in succeeded})
        uncounted = (status.get("uncountedTerminatedPods") or {}).get("succeeded") or ()
        counted += len(uncounted)
    successes = max(counted, distinct)
    if isinstance(completions, int):
        return successes >= completions
    terminated = all((p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                     for p in pods)  # fmt: skip
    return successes >= 1 and terminated


def _pod_id(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or ""), str(meta.get("name") or "")


def _pod_index(pod: Mapping[str, Any]) -> str | None:
    meta = pod.get("metadata") or {}
    index = (meta.get("annotations") or {}).get(COMPLETION_INDEX)
    return index if index is not None else (meta.get("labels") or {}).get(COMPLETION_INDEX)


class Job(SuspendedKind):
    kind = "Job"
    api_versions = ("batch/v1",)
    plural = "jobs"
    crd = False
    summary = (
        "``main``: ``parallelism`` pods (default 1), ``min(parallelism, completions)`` when "
        "``completions`` is set"
    )

    def read(self, fields: Fields, doc: dict[str, Any]) -> KindPods:
        annotations = (doc.get("metadata") or {}).get("annotations") or {}
        least = annotations.get(MIN_PARALLELISM)
        return read_job_spec(
            fields, spec_of(fields, doc), "spec", "main", None if least is None else str(least)
        )

    def selector_paths(self, obj: Mapping[str, Any]) -> dict[str, Path]:
        return {"main": ("spec", "template", "spec")}

    def resize_ops(self, obj: Mapping[str, Any], counts: Mapping[str, int]) -> Ops:
        """``spec.parallelism`` set to the pods admitted (Kueue sets it so under partial
        admission, and restores it on eviction)."""
        count = counts.get("main")
        if count is None or (obj.get("spec") or {}).get("parallelism") == count:
            return []
        return set_ops(obj, ("spec", "parallelism"), count)

    def finished(self, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
        return true_condition(obj, ("Complete", "Failed")) or job_pods_succeeded(obj, pods)


JOB = Job()
