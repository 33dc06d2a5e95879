"""A scenario's ``manifests:``: Kubernetes objects read by :mod:`fleetshare.manifests`, their
queues and priority classes resolved against the policy, as :class:`Workload` s.

Each entry is an inline object (a mapping with ``apiVersion``/``kind``), a file name relative
to the scenario (one or many YAML documents), YAML text (several lines), or
``{file | manifest, queue, duration, submit_at}``: the object(s) with defaults of their own.
What an object says itself wins: its queue label over the entry's ``queue`` over
``manifest_defaults.queue``; its ``fleetshare.io/duration`` and ``fleetshare.io/submit-at``
annotations likewise over the entry's and the scenario's. An object with no queue at all is
refused: Kueue would leave it alone, so in a scenario it would silently never run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fleetshare.inputs import InputError, read_text
from fleetshare.manifests import (
    QUEUE_LABEL,
    TEAM_LABEL,
    Defaults,
    Document,
    ManifestError,
    documents,
    parse_manifests,
    pod_priority_classes,
    resolve_priority,
)
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import validation_problems
from fleetshare.scenario.schema import ManifestEntrySpec, ScenarioSpec


class ManifestsError(ValueError):
    """A ``manifests:`` entry that cannot be used; the message names it."""


def _entry_documents(
    entry: str | dict[str, Any], where: str, base: Path, defaults: Defaults
) -> list[Document]:
    if isinstance(entry, dict) and ("apiVersion" in entry or "kind" in entry):
        return [Document(where, entry, defaults)]
    if isinstance(entry, str):
        return _text_documents(entry, where, base, defaults)
    try:
        spec = ManifestEntrySpec.model_validate(entry)
    except ValidationError as exc:
        problems = "; ".join(
            r if p in ("", "(top level)") else f"{p}: {r}"
            for p, r in validation_problems(exc, entry)
        )
        raise ManifestsError(f"{where}: {problems}") from None
    own = Defaults(
        queue=spec.queue or defaults.queue,
        duration=defaults.duration if spec.duration is None else spec.duration,
        submit_at=defaults.submit_at if spec.submit_at is None else spec.submit_at,
    )
    if spec.file is not None:
        return _file_documents(spec.file, base, own)
    if isinstance(spec.manifest, str):
        return _text_documents(spec.manifest, f"{where}.manifest", base, own)
    return [Document(f"{where}.manifest", spec.manifest, own)]


def _text_documents(text: str, where: str, base: Path, defaults: Defaults) -> list[Document]:
    """Several lines are YAML text; one line names a file."""
    if "\n" not in text.strip():
        return _file_documents(text.strip(), base, defaults)
    try:
        return documents(text, where, defaults)
    except InputError as exc:
        raise ManifestsError(str(exc)) from None


def _file_documents(name: str, base: Path, defaults: Defaults) -> list[Document]:
    try:
        return documents(read_text(base / name, name), name, defaults)
    except InputError as exc:
        raise ManifestsError(str(exc)) from None


def manifest_workloads(
    spec: ScenarioSpec,
    base: Path,
    team_of: Callable[[str], str],
    priority_of: Callable[[str | None], int],
    local_queue_of: Callable[[str], str | None] = lambda _: None,
    default_priority: int | None = None,
) -> tuple[list[Workload], list[str]]:
    """The workloads of ``spec.manifests`` and the notes on what was not modelled.
    ``team_of`` resolves a queue (KeyError with the reason otherwise), ``priority_of`` a
    policy priority class, ``local_queue_of`` the local queue a queue name comes through (for
    admission fair sharing), ``default_priority`` the policy's default class's weight. A
    priority class a pod template names is a PriorityClass among the manifests, if one is
    (:func:`~fleetshare.manifests.resolve_priority`)."""
    d = spec.manifest_defaults
    defaults = Defaults(queue=d.queue, duration=d.duration, submit_at=d.submit_at)
    docs: list[Document] = []
    for i, entry in enumerate(spec.manifests):
        docs.extend(_entry_documents(entry, f"manifests[{i}]", base, defaults))
    try:
        parsed = parse_manifests(docs)
        pod_classes = pod_priority_classes(docs)
    except ManifestError as exc:
        raise ManifestsError(str(exc)) from None
    out: list[Workload] = []
    notes: list[str] = []
    for mw in parsed:
        if mw.queue is None:
            raise ManifestsError(
                f"{mw.where}: no queue: Kueue leaves a job without a {QUEUE_LABEL} label "
                f"alone, so it would never run; label it ({QUEUE_LABEL}: <LocalQueue> or "
                f"{TEAM_LABEL}: <team>) or set the entry's queue or manifest_defaults.queue"
            )
        try:
            team = team_of(mw.queue)
        except KeyError as exc:
            raise ManifestsError(f"{mw.where}: {mw.queue_field}: {exc.args[0]}") from None
        try:
            priority = resolve_priority(
                mw.priority_source, mw.priority_class, priority_of, default_priority, pod_classes
            )
        except KeyError as exc:
            raise ManifestsError(f"{mw.where}: {mw.priority_field}: {exc.args[0]}") from None
        out.append(
            Workload(
                name=mw.name,
                team=team,
                podsets=mw.podsets,
                submit_time=mw.submit_at,
                priority=priority,
                priority_class=mw.priority_class,
                duration=mw.duration,
                labels=dict(mw.labels),
                queue=local_queue_of(mw.queue),
            )
        )
        notes.extend(mw.notes)
    return out, notes
