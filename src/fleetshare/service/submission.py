"""What ``POST /api/v1/workloads`` accepts: a native workload spec or Kubernetes objects.

The body is JSON (``application/json``) or YAML text (``application/yaml``, ``text/yaml``,
``application/x-yaml``; several documents allowed). It holds either

- fleetshare's native workload spec (a mapping as in scenario files), or
- Kubernetes objects (mappings with ``apiVersion`` and ``kind``, one document, several, a JSON
  array or a ``kind: List``) that :mod:`fleetshare.manifests` reads: batch/v1 Job,
  PyTorchJob, JobSet, RayJob, RayCluster, a Pod or the pods of one pod group. They must make
  **one** workload (``fleetshare job submit`` sends a file of many one workload at a time).

A manifest becomes a :class:`WorkloadSpec` (what the store keeps): its name, its team from
the queue label (``kueue.x-k8s.io/queue-name`` as ``namespace/name``, or
``fleetshare.io/team``) resolved by :meth:`Policy.team_for`, its priority class, pod sets
(requests as exact quantities, node selector, tolerations, required node affinity), labels and
``fleetshare.io/duration``. An object named only by ``metadata.generateName`` gets five random
characters after the prefix, as the Kubernetes API server does. Errors name the document,
object and field (:class:`SubmissionError`); a team token naming a queue that is not its own
team's gets the same 403 whether the queue exists or not.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from fleetshare.inputs import InputError, decode, parse_json, parse_yaml_all
from fleetshare.manifests import (
    QUEUE_LABEL,
    TEAM_LABEL,
    Document,
    ManifestError,
    ManifestWorkload,
    parse_manifests,
)
from fleetshare.model.quantity import MILLI
from fleetshare.model.workload import PodSet
from fleetshare.policy.schema import Policy
from fleetshare.scenario.schema import WorkloadSpec
from fleetshare.service.auth import Principal

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
"""Content types read as YAML text (anything else must be JSON)."""

NOT_A_WORKLOAD = "give a workload spec (a mapping) or Kubernetes objects (apiVersion, kind)"
_SUFFIX = string.ascii_lowercase + string.digits


class SubmissionError(Exception):
    """A body that is not a workload: ``problems`` are (location, message) pairs; ``status``
    422, or 403 for a team token's foreign queue."""

    def __init__(self, problems: list[tuple[list[str | int], str]], status: int = 422) -> None:
        super().__init__(problems)
        self.problems = problems
        self.status = status


@dataclass(frozen=True)
class Submission:
    """A body read: the spec to submit and, for a manifest, where it came from."""

    spec: WorkloadSpec
    kind: str | None = None
    """The manifest's kind (None for a native spec)."""
    notes: tuple[str, ...] = ()
    """What the manifest holds that fleetshare does not model (see the manifests package)."""


def is_manifest(data: Any) -> bool:
    """A Kubernetes object, or a list of them (a pod group), rather than a native spec."""
    if isinstance(data, list):
        return bool(data) and all(isinstance(d, dict) and "kind" in d for d in data)
    return isinstance(data, dict) and "apiVersion" in data and "kind" in data


def read_body(body: bytes, content_type: str) -> Any:
    """The body's documents: JSON (one value) or YAML (one document, or a list of several)."""
    media = content_type.split(";", 1)[0].strip().lower()
    try:
        text = decode(body, "request body")
        if media in YAML_TYPES:
            docs = parse_yaml_all(text, "request body")
            if not docs:
                raise InputError("request body", "holds no YAML document")
            return docs[0] if len(docs) == 1 else docs
        if not text.strip():
            raise InputError("request body", "is empty")
        return parse_json(text, "request body")
    except InputError as exc:
        raise SubmissionError([(["body"], exc.why)]) from None


def native(data: Any) -> WorkloadSpec:
    """A native spec, validated (422 names each bad field)."""
    if not isinstance(data, dict):
        raise SubmissionError([(["body"], NOT_A_WORKLOAD)])
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as exc:
        problems: list[tuple[list[str | int], str]] = []
        for error in exc.errors(include_url=False):
            loc: list[str | int] = ["body", *error["loc"]]
            problems.append((loc, error["msg"]))
        raise SubmissionError(problems) from None


def _named(obj: Any) -> Any:
    """An object with only ``metadata.generateName`` gets a random five-character suffix."""
    if not isinstance(obj, dict):
        return obj
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("name") is not None:
        return obj
    prefix = metadata.get("generateName")
    if not isinstance(prefix, str) or not prefix:
        return obj
    suffix = "".join(secrets.choice(_SUFFIX) for _ in range(5))
    return {**obj, "metadata": {**metadata, "name": prefix + suffix}}


def manifest(data: Any, policy: Policy, principal: Principal) -> Submission:
    """Kubernetes objects making one workload, as a spec for the policy in force."""
    objects = data if isinstance(data, list) else [data]
    docs = []
    for i, obj in enumerate(objects):
        where = "body" if len(objects) == 1 else f"body document {i + 1}"
        items = obj.get("items") if isinstance(obj, dict) else None
        if isinstance(obj, dict) and obj.get("kind") == "List" and isinstance(items, list):
            obj = {**obj, "items": [_named(item) for item in items]}
        docs.append(Document(where, _named(obj)))
    try:
        parsed = parse_manifests(docs)
    except ManifestError as exc:
        raise SubmissionError([(["body"], str(exc))]) from None
    if len(parsed) != 1:
        names = ", ".join(w.name for w in parsed)
        raise SubmissionError(
            [
                (
                    ["body"],
                    f"describes {len(parsed)} workloads ({names}); submit one per request "
                    "(fleetshare job submit FILE sends a file of many one at a time)",
                )
            ]
        )
    mw = parsed[0]
    team = _team(mw, policy, principal)
    try:
        policy.priority_of(mw.priority_class)
    except KeyError as exc:
        raise SubmissionError(
            [(["body"], f"{mw.where}: {mw.priority_field}: {exc.args[0]}")]
        ) from None
    return Submission(spec_of(mw, team), mw.kind, mw.notes)


def _team(mw: ManifestWorkload, policy: Policy, principal: Principal) -> str:
    if mw.queue is None:
        raise SubmissionError(
            [
                (
                    ["body"],
                    f"{mw.where}: metadata.labels: no queue: label it {QUEUE_LABEL}: "
                    f"<LocalQueue> or {TEAM_LABEL}: <team>",
                )
            ]
        )
    try:
        team = policy.team_for(mw.queue)
    except KeyError as exc:
        if principal.team is not None:
            where = f"{mw.where}: {mw.queue_field}: "
            raise _not_found(mw.queue, principal, ["body"], where) from None
        why = f"{mw.where}: {mw.queue_field}: {exc.args[0]}"
        raise SubmissionError([(["body"], why)]) from None
    if not principal.sees_team(team):
        raise foreign(principal, mw.queue)
    return team


def foreign(principal: Principal, queue: str) -> SubmissionError:
    """The one answer a team token gets for any queue or team that is not its own (it names
    only what the request named, the same whether that exists or not)."""
    why = (
        f"a {principal.scope} token submits to team {principal.team} only: {queue!r} is not "
        f"team {principal.team} or one of its queues"
    )
    return SubmissionError([(["body"], why)], 403)


def _not_found(
    queue: str, principal: Principal, loc: list[str | int], where: str
) -> SubmissionError:
    """A team token naming a team or queue the policy lacks: its own team is told so (422;
    the policy's teams are not listed to it), any other name gets :func:`foreign`."""
    if queue != principal.team:
        return foreign(principal, queue)
    why = f"{where}team {queue!r} (this token's team) is not in the policy in force"
    return SubmissionError([(loc, why)])


def check_spec(spec: WorkloadSpec, policy: Policy, principal: Principal) -> None:
    """A native spec's team and priority class against ``policy``: a team token may name only
    its own team (or one of its queues), 403 otherwise, the same whether the named team or
    queue exists or not; an unknown team (for an admin, or a team token's own) or priority
    class is 422 on that field."""
    try:
        team = policy.team_for(spec.team)
    except KeyError as exc:
        if principal.team is not None:
            raise _not_found(spec.team, principal, ["body", "team"], "") from None
        raise SubmissionError([(["body", "team"], exc.args[0])]) from None
    if principal.team is not None and team != principal.team:
        raise foreign(principal, spec.team)
    try:
        policy.priority_of(spec.priority)
    except KeyError as exc:
        raise SubmissionError([(["body", "priority"], exc.args[0])]) from None


def check_name(spec: WorkloadSpec) -> None:
    """A workload's name is a segment of the API's paths (``/api/v1/workloads/NAME``): one
    with a ``/`` could never be read, explained or cancelled, so it is refused (422 on
    ``name``). (``.``, ``..`` and characters no name may hold are the schema's
    :data:`~fleetshare.inputs.Name`.)"""
    if "/" in spec.name:
        why = f"{spec.name!r}: a workload name may not hold '/' (it names the workload in URLs)"
        raise SubmissionError([(["body", "name"], why)])


def _amount(milli: int) -> int | str:
    return milli // MILLI if milli % MILLI == 0 else f"{milli}m"


def _podset(ps: PodSet) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": ps.name,
        "count": ps.count,
        "requests": {k: _amount(v) for k, v in sorted(ps.requests.items())},
    }
    if ps.min_count is not None:
        out["min_count"] = ps.min_count
    if ps.node_selector:
        out["node_selector"] = dict(ps.node_selector)
    if ps.tolerations:
        out["tolerations"] = [
            {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
            for t in ps.tolerations
        ]
    if ps.affinity:
        out["node_affinity"] = [
            [{"key": r.key, "operator": r.operator, "values": list(r.values)} for r in term]
            for term in ps.affinity
        ]
    return out


def spec_of(mw: ManifestWorkload, team: str) -> WorkloadSpec:
    """The native spec of a manifest workload for ``team`` (the store keeps specs)."""
    data: dict[str, Any] = {
        "name": mw.name,
        "team": team,
        "podsets": [_podset(ps) for ps in mw.podsets],
        "labels": dict(mw.labels),
    }
    if mw.priority_class is not None:
        data["priority"] = mw.priority_class
    if mw.duration is not None:
        data["duration"] = mw.duration
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as exc:  # pragma: no cover - the manifests package checked these
        raise SubmissionError([(["body"], f"{mw.where}: {exc}")]) from None
