"""Kubernetes objects -> :class:`ManifestWorkload`: metadata, labels, names, pod groups."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fleetshare.fields import READ
from fleetshare.inputs import parse_yaml_all
from fleetshare.manifests.durations import parse_duration
from fleetshare.manifests.kinds import (
    KINDS,
    UNSUPPORTED,
    KindPods,
    PodGroupKind,
    PodSetKind,
    RawPodSet,
)
from fleetshare.manifests.kinds.base import (
    FAST_ADMISSION,
    POD_GROUP_COUNT,
    POD_GROUP_LABEL,
    QUEUE_LABEL,
    SERVING,
    TEAM_LABEL,
    check_api_version,
)
from fleetshare.manifests.kinds.job import MIN_PARALLELISM
from fleetshare.manifests.kueue_keys import NOT_MODELLED, is_kueue_key, key_note, key_rule
from fleetshare.manifests.priority import PRIORITY_CLASS_API, PRIORITY_CLASS_KIND, PodPriorityClass
from fleetshare.manifests.values import Fields, ManifestError, join
from fleetshare.model.workload import PodSet

PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
FLEETSHARE_PRIORITY_LABEL = "fleetshare.io/priority-class"
DURATION_ANNOTATION = "fleetshare.io/duration"
SUBMIT_ANNOTATION = "fleetshare.io/submit-at"
KNOWN_ANNOTATIONS = (DURATION_ANNOTATION, SUBMIT_ANNOTATION)
GROUP_ANNOTATIONS = (POD_GROUP_COUNT, FAST_ADMISSION, SERVING)
"""The pod-group annotations read on a pod of a group."""
PrioritySource = Literal["label", "pod", "none"]
"""Where a priority class came from: Kueue's WorkloadPriorityClass label, a pod priority class
(a pod template's ``priorityClassName``, a Kubeflow ``schedulingPolicy.priorityClass``), or
neither (the default)."""
MAX_PODSETS = 8
"""Kueue's limit on pod sets per workload (and on distinct pod shapes in a pod group)."""
MAX_PODS = 1_000_000
"""The most pods one workload may have: beyond any cluster (5,000 nodes of 110 pods), and low
enough that replicas x parallelism x a request stays far inside 64-bit arithmetic."""


@dataclass(frozen=True, slots=True)
class Defaults:
    """What an object gets when it carries no label or annotation of its own (a scenario's
    ``manifest_defaults`` and per-entry settings)."""

    queue: str | None = None
    duration: float | None = None
    submit_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Document:
    """One parsed YAML document; ``where`` names it in messages (``jobs.yaml document 2``)."""

    where: str
    data: Any
    defaults: Defaults = field(default_factory=Defaults)
    origin: str | None = None
    """The kind of the object this one was expanded from (a Deployment's pod), if any."""
    notes: tuple[str, ...] = ()
    """Notes on the expansion, carried to the workload."""


@dataclass(frozen=True, slots=True)
class ManifestWorkload:
    """A job read from Kubernetes objects, ready to become a
    :class:`~fleetshare.model.workload.Workload` once its queue and priority class are resolved
    against a policy.

    ``queue`` is what :meth:`Policy.team_for <fleetshare.policy.schema.Policy.team_for>`
    resolves: ``namespace/name`` of the LocalQueue a ``kueue.x-k8s.io/queue-name`` label names
    (LocalQueues live in the job's namespace), or the ``fleetshare.io/team`` label, or the
    default; None when nothing names one (Kueue leaves such objects alone). ``queue_field`` and
    ``priority_field`` say where each came from, for messages. ``order`` is the position of the
    (last) object in the input: submissions at one instant keep it."""

    name: str
    namespace: str
    kind: str
    queue: str | None
    queue_field: str
    priority_class: str | None
    priority_field: str
    podsets: tuple[PodSet, ...]
    duration: float | None
    submit_at: float
    order: int
    labels: Mapping[str, str]
    where: str
    notes: tuple[str, ...] = ()
    priority_source: PrioritySource = "none"


@dataclass
class _Object:
    """One object read, before names are settled and pod groups assembled."""

    doc: Document
    order: int
    kind: str
    namespace: str
    name: str | None
    generate_name: str | None
    labels: dict[str, str]
    podsets: tuple[RawPodSet, ...]
    queue: str | None
    queue_field: str
    priority_class: str | None
    priority_field: str
    priority_source: PrioritySource
    duration: float | None
    submit_at: float
    notes: list[str]
    group: str | None = None
    group_count: int = 0
    fast: bool = False

    def ident(self) -> str:
        name = self.name or f"{self.generate_name}*"
        return f"{self.kind} {self.namespace}/{name}"

    @property
    def where(self) -> str:
        return f"{self.doc.where} ({self.ident()})"


def documents(text: str, source: str, defaults: Defaults | None = None) -> list[Document]:
    """The YAML documents of ``text`` (one or many), named ``source document N``."""
    return [
        Document(f"{source} document {i + 1}", data, defaults or Defaults())
        for i, data in enumerate(parse_yaml_all(text, source))
    ]


def parse_text(text: str, source: str, defaults: Defaults | None = None) -> list[ManifestWorkload]:
    """Every workload in a (multi-document) YAML text."""
    return parse_manifests(documents(text, source, defaults))


def parse_manifest(data: Any, where: str = "manifest") -> ManifestWorkload:
    """One object (not a pod group member) as a workload."""
    out = parse_manifests([Document(where, data)])
    if len(out) != 1:  # pragma: no cover - one object gives one workload or an error
        raise ManifestError(where, "does not describe one workload")
    return out[0]


def parse_manifests(docs: Sequence[Document]) -> list[ManifestWorkload]:
    """Workloads from Kubernetes objects, in input order.

    Pods sharing a ``kueue.x-k8s.io/pod-group-name`` (in one namespace) form one workload,
    wherever they appear in ``docs``. Names are ``metadata.name`` (``generateName`` plus 1,
    2, ... when only that is given), ``namespace/name`` where a name is used in several
    namespaces. Raises :class:`ManifestError` naming the document, object and field."""
    objects = [_read_object(doc, order) for order, doc in enumerate(_expand(docs))]
    _settle_names(objects)
    named: dict[tuple[str, str, str | None], _Object] = {}
    for obj in objects:
        key = (obj.kind, obj.namespace, obj.name)
        if key in named:
            raise ManifestError(obj.where, f"repeats the object of {named[key].doc.where}")
        named[key] = obj
    singles = [o for o in objects if o.group is None]
    groups: dict[tuple[str, str], list[_Object]] = {}
    for obj in objects:
        if obj.group is not None:
            groups.setdefault((obj.namespace, obj.group), []).append(obj)
    built = [(o.namespace, o.name or "", o.order, o.where, _single(o)) for o in singles]
    for (namespace, group), pods in groups.items():
        workload = _group(namespace, group, pods)
        built.append((namespace, group, workload.order, workload.where, workload))
    seen: dict[tuple[str, str], str] = {}
    for namespace, name, _, where, _w in sorted(built, key=lambda b: b[2]):
        if (namespace, name) in seen:
            raise ManifestError(
                where,
                f"workload name {namespace}/{name} is already used by {seen[namespace, name]}",
            )
        seen[namespace, name] = where
    namespaces: dict[str, set[str]] = {}
    for namespace, name in seen:
        namespaces.setdefault(name, set()).add(namespace)
    out = []
    for namespace, name, _, _, workload in sorted(built, key=lambda b: b[2]):
        unique = name if len(namespaces[name]) == 1 else f"{namespace}/{name}"
        out.append(_renamed(workload, unique))
    return out


def pod_priority_classes(docs: Sequence[Document]) -> dict[str, PodPriorityClass]:
    """The Kubernetes PriorityClasses (``scheduling.k8s.io/v1``) among ``docs``, by name
    (:mod:`.priority`: what a pod template's ``priorityClassName`` resolves to)."""
    out: dict[str, PodPriorityClass] = {}
    for doc in docs:
        data = doc.data
        if isinstance(data, dict) and data.get("kind") == "List":
            items = Fields(doc.where).items(data.get("items"), "items")
            out.update(pod_priority_classes(
                [Document(f"{doc.where} items[{i}]", item) for i, item in enumerate(items)]
            ))  # fmt: skip
            continue
        if not isinstance(data, dict) or data.get("kind") != PRIORITY_CLASS_KIND:
            continue
        fields = Fields(f"{doc.where} ({PRIORITY_CLASS_KIND})")
        if data.get("apiVersion") != PRIORITY_CLASS_API:
            raise fields.error("apiVersion", f"must be {PRIORITY_CLASS_API}")
        meta = fields.mapping(data.get("metadata"), "metadata", required=True)
        name = fields.text(meta.get("name"), "metadata.name", required=True)
        value = data.get("value")
        if isinstance(value, bool) or not isinstance(value, int):
            raise fields.error("value", f"must be a whole number, got {value!r}")
        if value > 1_000_000_000:
            raise fields.error("value", "user PriorityClasses go up to 1000000000")
        if not isinstance(data.get("globalDefault", False), bool):
            raise fields.error("globalDefault", "must be true or false")
        assert name is not None
        if name in out:
            raise fields.error("metadata.name", f"repeats the PriorityClass {name!r}")
        out[name] = PodPriorityClass(name, value, data.get("globalDefault") is True)
    return out


def _renamed(w: ManifestWorkload, name: str) -> ManifestWorkload:
    if name == w.name:
        return w
    return ManifestWorkload(
        name, w.namespace, w.kind, w.queue, w.queue_field, w.priority_class, w.priority_field,
        w.podsets, w.duration, w.submit_at, w.order, w.labels, w.where, w.notes, w.priority_source,
    )  # fmt: skip


def _expand(docs: Iterable[Document]) -> list[Document]:
    """``kind: List`` documents (as ``kubectl get -o yaml`` writes) become their items; an
    object queued through the pods or Jobs it creates (a Deployment, a CronJob, ...) becomes
    those (:meth:`PodGroupKind.expand`); PriorityClasses are read apart
    (:func:`~fleetshare.manifests.priority.pod_priority_classes`)."""
    out = []
    for doc in docs:
        data = doc.data
        if isinstance(data, dict) and data.get("kind") == "List" and "items" in data:
            fields = Fields(doc.where)
            items = [
                Document(f"{doc.where} items[{i}]", item, doc.defaults)
                for i, item in enumerate(fields.items(data.get("items"), "items"))
            ]
            out.extend(_expand(items))
            continue
        kind = KINDS.get(str(data.get("kind"))) if isinstance(data, dict) else None
        if isinstance(data, dict) and data.get("kind") == PRIORITY_CLASS_KIND:
            continue
        if not isinstance(kind, PodGroupKind):
            out.append(doc)
            continue
        fields = Fields(doc.where)
        metadata = fields.mapping(data.get("metadata"), "metadata", required=True)
        name = fields.text(metadata.get("name"), "metadata.name", required=True)
        namespace = fields.text(metadata.get("namespace"), "metadata.namespace") or "default"
        where = f"{doc.where} ({kind.kind} {namespace}/{name})"
        expansion = kind.expand(Fields(where), data)
        for made in expansion.objects:
            made_where = f"{doc.where}, {kind.kind} {namespace}/{name}'s {made.get('kind')}"
            out.append(Document(made_where, made, doc.defaults, doc.origin or kind.kind,
                                expansion.notes))  # fmt: skip
    return out


def _read_object(doc: Document, order: int) -> _Object:
    fields = Fields(doc.where)
    data = fields.mapping(doc.data, "", required=True)
    kind = fields.text(data.get("kind"), "kind", required=True)
    api_version = fields.text(data.get("apiVersion"), "apiVersion", required=True)
    metadata = fields.mapping(data.get("metadata"), "metadata", required=True)
    name = fields.text(metadata.get("name"), "metadata.name")
    generate = fields.text(metadata.get("generateName"), "metadata.generateName")
    if name is None and generate is None:
        raise fields.error("metadata.name", "is required (or metadata.generateName)")
    namespace = fields.text(metadata.get("namespace"), "metadata.namespace") or "default"
    assert kind is not None and api_version is not None
    ident = f"{kind} {namespace}/{name or f'{generate}*'}"
    fields = Fields(f"{doc.where} ({ident})")
    supported = KINDS.get(kind)
    if not isinstance(supported, PodSetKind):
        why = UNSUPPORTED.get(kind, "an unknown kind; supported: " + ", ".join(KINDS))
        raise fields.error("kind", f"{kind} is not supported as a workload: {why}")
    check_api_version(fields, supported, data)
    labels = fields.strings(metadata.get("labels"), "metadata.labels")
    annotations = fields.strings(metadata.get("annotations"), "metadata.annotations")
    pods = supported.read(fields, data)
    notes = [*_metadata_notes(fields, kind, labels, annotations), *pods.notes]
    for raw in pods.podsets:
        notes.extend(raw.shape.notes)
    queue, queue_field = _queue(fields, labels, namespace, doc.defaults)
    priority, priority_field, source = _priority(fields, labels, pods)
    duration = _annotation_time(fields, annotations, DURATION_ANNOTATION, positive=True)
    submit = _annotation_time(fields, annotations, SUBMIT_ANNOTATION, positive=False)
    obj = _Object(
        doc=doc,
        order=order,
        kind=kind,
        namespace=namespace,
        name=name,
        generate_name=generate,
        labels=labels,
        podsets=pods.podsets,
        queue=queue,
        queue_field=queue_field,
        priority_class=priority,
        priority_field=priority_field,
        priority_source=source,
        duration=doc.defaults.duration if duration is None else duration,
        submit_at=doc.defaults.submit_at if submit is None else submit,
        notes=list(dict.fromkeys([*notes, *doc.notes])),
    )
    if kind == "Pod" and POD_GROUP_LABEL in labels:
        obj.group = labels[POD_GROUP_LABEL]
        path = join("metadata.annotations", POD_GROUP_COUNT)
        count = annotations.get(POD_GROUP_COUNT)
        if count is None:
            raise fields.error(path, f"is required for a pod of a group ({POD_GROUP_LABEL})")
        if not count.isdigit() or int(count) < 1:
            raise fields.error(path, f"must be a whole number of pods, at least 1, got {count!r}")
        obj.group_count = int(count)
        obj.fast = annotations.get(FAST_ADMISSION) == "true"
    return obj


def _metadata_notes(
    fields: Fields, kind: str, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> list[str]:
    """Kueue's labels and annotations by their rules (:data:`.kueue_keys.KEYS`): one read is
    read where it applies (noted on a kind it does not apply to), another noted with its
    rule's reason or as not modelled; the queue and priority-class keys given as annotations
    and an unknown ``fleetshare.io/`` annotation are refused (a misspelling must not pass
    unseen)."""
    notes = []
    for place, part, values in (
        ("label", "metadata.labels", labels),
        ("annotation", "metadata.annotations", annotations),
    ):
        for key in values:
            path = join(part, key)
            ours = place == "annotation" and key.startswith("fleetshare.io/")
            if ours and key not in KNOWN_ANNOTATIONS:
                known = ", ".join(KNOWN_ANNOTATIONS)
                raise fields.error(path, f"unknown annotation (known: {known})")
            if not is_kueue_key(key):
                continue
            rule = key_rule(place, key)
            if place == "annotation" and key in (QUEUE_LABEL, PRIORITY_LABEL):
                raise fields.error(
                    path, "is a label in Kueue, not an annotation: move it to labels"
                )
            note = _not_here(key, kind, labels) if rule and rule.verdict in READ else key_note(rule)
            if note:
                notes.append(f"{path}: {note}")
    return notes


def _not_here(key: str, kind: str, labels: Mapping[str, str]) -> str | None:
    """Why a key the reader reads does not apply to this object (None when it does)."""
    if key == MIN_PARALLELISM and kind != "Job":
        return "partial admission applies to a batch/v1 Job only; ignored"
    if key in (POD_GROUP_LABEL, *GROUP_ANNOTATIONS) and kind != "Pod":
        return NOT_MODELLED
    if key in GROUP_ANNOTATIONS and POD_GROUP_LABEL not in labels:
        return f"without {POD_GROUP_LABEL} the pod is a workload of its own"
    return None


def _queue(
    fields: Fields, labels: Mapping[str, str], namespace: str, defaults: Defaults
) -> tuple[str | None, str]:
    local, team = labels.get(QUEUE_LABEL), labels.get(TEAM_LABEL)
    if local is not None and team is not None:
        raise fields.error(
            "metadata.labels",
            f"give {QUEUE_LABEL} (a LocalQueue) or {TEAM_LABEL} (a team or queue), not both",
        )
    if local is not None:
        if not local:
            raise fields.error(join("metadata.labels", QUEUE_LABEL), "must not be empty")
        return f"{namespace}/{local}", join("metadata.labels", QUEUE_LABEL)
    if team is not None:
        if not team:
            raise fields.error(join("metadata.labels", TEAM_LABEL), "must not be empty")
        return team, join("metadata.labels", TEAM_LABEL)
    return defaults.queue, "the default queue"


def _priority(
    fields: Fields, labels: Mapping[str, str], pods: KindPods
) -> tuple[str | None, str, PrioritySource]:
    """Kueue's order: the WorkloadPriorityClass label, else the pod priority class the kind
    names (a Kubeflow ``schedulingPolicy.priorityClass``), else the first pod template's
    ``priorityClassName``; ``fleetshare.io/priority-class`` is a synonym of the label."""
    kueue, ours = labels.get(PRIORITY_LABEL), labels.get(FLEETSHARE_PRIORITY_LABEL)
    if kueue is not None and ours is not None and kueue != ours:
        raise fields.error(
            "metadata.labels",
            f"{PRIORITY_LABEL} ({kueue!r}) and {FLEETSHARE_PRIORITY_LABEL} ({ours!r}) differ",
        )
    if kueue:
        return kueue, join("metadata.labels", PRIORITY_LABEL), "label"
    if ours:
        return ours, join("metadata.labels", FLEETSHARE_PRIORITY_LABEL), "label"
    if pods.priority is not None:
        return pods.priority[0], pods.priority[1], "pod"
    for raw in pods.podsets:
        if raw.shape.priority_class is not None:
            where = f"the {raw.name} pod template's priorityClassName"
            return raw.shape.priority_class, where, "pod"
    return None, "no priority class (the default)", "none"


def _annotation_time(
    fields: Fields, annotations: Mapping[str, str], key: str, *, positive: bool
) -> float | None:
    text = annotations.get(key)
    if text is None:
        return None
    path = join("metadata.annotations", key)
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise fields.error(path, str(exc)) from None
    if positive and seconds <= 0:
        raise fields.error(path, f"must be more than 0 seconds, got {text!r}")
    return seconds


def _settle_names(objects: list[_Object]) -> None:
    """``generateName`` objects get the first free ``prefix1``, ``prefix2``, ... of their
    namespace (Kubernetes adds a random suffix; a scenario needs names it can expect)."""
    taken = {(o.namespace, o.kind == "Pod", o.name) for o in objects if o.name is not None}
    counters: dict[tuple[str, bool, str], int] = {}
    for obj in objects:
        if obj.name is not None:
            continue
        assert obj.generate_name is not None
        key = (obj.namespace, obj.kind == "Pod", obj.generate_name)
        n = counters.get(key, 0)
        while True:
            n += 1
            candidate = f"{obj.generate_name}{n}"
            if (obj.namespace, obj.kind == "Pod", candidate) not in taken:
                break
        counters[key] = n
        obj.name = candidate
        taken.add((obj.namespace, obj.kind == "Pod", candidate))


def _podsets(raws: Iterable[RawPodSet]) -> tuple[PodSet, ...]:
    return tuple(
        PodSet(
            r.name,
            r.count,
            dict(r.shape.requests),
            dict(r.shape.node_selector),
            r.shape.tolerations,
            r.shape.affinity,
            r.shape.required_topology,
            r.shape.preferred_topology,
            r.min_count,
        )
        for r in raws
        if r.count > 0
    )


def _check_podsets(where: str, podsets: tuple[PodSet, ...]) -> None:
    if not podsets:
        raise ManifestError(where, "runs no pods (every pod set has 0 replicas)")
    if len(podsets) > MAX_PODSETS:
        raise ManifestError(
            where, f"has {len(podsets)} pod sets; Kueue allows at most {MAX_PODSETS}"
        )
    pods = sum(ps.count for ps in podsets)
    if pods > MAX_PODS:
        raise ManifestError(where, f"has {pods:,} pods; at most {MAX_PODS:,} are accepted")


def _single(obj: _Object) -> ManifestWorkload:
    podsets = _podsets(obj.podsets)
    _check_podsets(obj.where, podsets)
    assert obj.name is not None
    return ManifestWorkload(
        name=obj.name,
        namespace=obj.namespace,
        kind=obj.doc.origin or obj.kind,
        queue=obj.queue,
        queue_field=obj.queue_field,
        priority_class=obj.priority_class,
        priority_field=obj.priority_field,
        podsets=podsets,
        duration=obj.duration,
        submit_at=obj.submit_at,
        order=obj.order,
        labels=obj.labels,
        where=obj.where,
        notes=tuple(f"{obj.where}: {n}" for n in obj.notes),
        priority_source=obj.priority_source,
    )


def _group(namespace: str, group: str, pods: list[_Object]) -> ManifestWorkload:
    """Pods of one group: one workload, pods of one shape forming a pod set (named after the
    first of them), as Kueue builds it once all ``pod-group-total-count`` pods exist; a group
    admitted fast (``pod-group-fast-admission``) may have fewer, the missing ones counted as
    the first pod."""
    first, last = pods[0], pods[-1]
    where = f"pod group {namespace}/{group} ({first.doc.where} .. {last.doc.where})"
    if len(pods) == 1:
        where = f"pod group {namespace}/{group} ({first.doc.where})"
    for pod in pods[1:]:
        for what, mine, theirs in (
            (f"metadata.annotations.{POD_GROUP_COUNT}", pod.group_count, first.group_count),
            (pod.queue_field, pod.queue, first.queue),
            (pod.priority_field, pod.priority_class, first.priority_class),
            (f"metadata.annotations.{FAST_ADMISSION}", pod.fast, first.fast),
        ):
            if mine != theirs:
                raise ManifestError(
                    pod.where,
                    f"{what}: {mine!r} differs from {theirs!r} of {first.ident()} in the same "
                    "pod group",
                )
    missing = first.group_count - len(pods) if first.fast else 0
    if len(pods) + max(missing, 0) != first.group_count:
        fix = (
            "Kueue waits for the rest"
            if len(pods) < first.group_count
            else ("Kueue deletes the extra pods")
        )
        raise ManifestError(
            where,
            f"{POD_GROUP_COUNT} is {first.group_count} but {len(pods)} pods are given ({fix}); "
            "give every pod of the group",
        )
    shapes: dict[tuple[Any, ...], list[_Object]] = {}
    for pod in pods:
        shape = pod.podsets[0].shape
        key = (
            tuple(sorted(shape.requests.items())),
            tuple(sorted(shape.node_selector.items())),
            shape.tolerations,
            shape.affinity,
        )
        shapes.setdefault(key, []).append(pod)
    raws = [
        RawPodSet(members[0].name or "", len(members) + (missing if i == 0 else 0),
                  members[0].podsets[0].shape)
        for i, members in enumerate(shapes.values())
    ]  # fmt: skip
    podsets = _podsets(raws)
    _check_podsets(where, podsets)
    durations = [p.duration for p in pods]
    notes = [f"{p.where}: {n}" for p in pods for n in p.notes]
    return ManifestWorkload(
        name=group,
        namespace=namespace,
        kind=first.doc.origin or "Pod",
        queue=first.queue,
        queue_field=first.queue_field,
        priority_class=first.priority_class,
        priority_field=first.priority_field,
        podsets=podsets,
        duration=None if None in durations else max(d for d in durations if d is not None),
        submit_at=max(p.submit_at for p in pods),
        order=last.order,
        labels=first.labels,
        where=where,
        notes=tuple(dict.fromkeys(notes)),
        priority_source=first.priority_source,
    )
