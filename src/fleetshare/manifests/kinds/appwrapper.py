"""``workload.codeflare.dev/v1beta2`` AppWrapper (Kueue's ``appwrapper`` integration): one
pod set per pod set its components declare (``spec.components[].podSets[]``: the pod template
at ``path`` in the component, ``replicas`` pods, default 1), named ``<name>-<n>`` in order;
where a component declares none, the ones the AppWrapper controller infers for a kind it
knows, read here as that kind's pod sets (a wrapped Job, JobSet, Kubeflow job, Ray kind, Pod,
Deployment or StatefulSet). Suspended at ``spec.suspend``; admitted by giving each
component's ``podSetInfos`` the node selectors (the AppWrapper controller applies them to the
objects it creates; the templates stay as written); finished when its phase is Succeeded, or
Failed once its resources are gone."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fleetshare.manifests.kinds.base import (
    Injected,
    KindPods,
    Ops,
    Path,
    PodGroupKind,
    PodSetKind,
    RawPodSet,
    SuspendedKind,
    get,
    injected_for,
    pointer,
    spec_of,
    true_condition,
)
from fleetshare.manifests.pods import read_template
from fleetshare.manifests.values import Fields, join

_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def parse_path(text: str) -> Path | None:
    """An AppWrapper pod-set path (``template.spec.replicatedJobs[0].template``) as a path
    from the component; None when it is not one."""
    if not text.startswith("template"):
        return None
    out: list[str | int] = ["template"]
    rest = text[len("template") :]
    while rest:
        step = _STEP.match(rest)
        if step is None:
            return None
        out.append(step.group(1) if step.group(1) is not None else int(step.group(2)))
        rest = rest[step.end() :]
    return tuple(out)


class AppWrapper(SuspendedKind):
    kind = "AppWrapper"
    api_versions = ("workload.codeflare.dev/v1beta2",)
    plural = "appwrappers"
    summary = (
        "``<name>-<n>``: each pod set its components declare (``podSets[]``: ``replicas``, "
        "default 1, of the template at ``path``), else those of a wrapped kind read here"
    )

    def read(self, fields: Fields, doc: dict[str, Any]) -> KindPods:
        spec = spec_of(fields, doc)
        path = "spec.components"
        components = fields.items(spec.get("components"), path, required=True)
        if not components:
            raise fields.error(path, "must list at least one component")
        out: list[RawPodSet] = []
        notes: list[str] = []
        for i, item in enumerate(components):
            where = join(path, i)
            component = fields.mapping(item, where, required=True)
            fields.mapping(component.get("template"), join(where, "template"), required=True)
            declared = fields.items(component.get("podSets"), join(where, "podSets"))
            if declared:
                podsets = self._declared(fields, component, declared, where)
            else:
                inferred = self._inferred(fields, component, where)
                podsets = list(inferred.podsets)
                notes.extend(inferred.notes)
            for raw in podsets:
                out.append(RawPodSet(f"{_name(doc)}-{len(out)}", raw.count, raw.shape))
        return KindPods(tuple(out), tuple(notes))

    def _declared(
        self, fields: Fields, component: Mapping[str, Any], declared: list[Any], where: str
    ) -> list[RawPodSet]:
        out = []
        for j, entry in enumerate(declared):
            at = join(join(where, "podSets"), j)
            podset = fields.mapping(entry, at, required=True)
            text = fields.text(podset.get("path"), join(at, "path"), required=True)
            assert text is not None
            path = parse_path(text)
            if path is None:
                raise fields.error(join(at, "path"), f"{text!r} is not a path from 'template'")
            template = get(component, path)
            shape = read_template(fields, template, join(where, text))
            count = fields.whole(podset.get("replicas"), join(at, "replicas"), default=1)
            out.append(RawPodSet(str(j), count, shape))
        return out

    def _inferred(self, fields: Fields, component: Mapping[str, Any], where: str) -> KindPods:
        """The pod sets the AppWrapper controller infers for a wrapped kind it knows."""
        wrapped, kind = _wrapped(component)
        at = Fields(f"{fields.where} {join(where, 'template')}")
        paths = _template_paths(kind, wrapped) if isinstance(kind, PodSetKind) else None
        if isinstance(kind, PodSetKind) and paths is not None:
            pods = kind.read(at, dict(wrapped))
            if len(pods.podsets) == len(paths):
                return pods
        if isinstance(kind, PodGroupKind) and kind.kind in ("Deployment", "StatefulSet"):
            spec = at.mapping(wrapped.get("spec"), "spec", required=True)
            count = at.whole(spec.get("replicas"), "spec.replicas", default=1)
            shape = read_template(at, spec.get("template"), "spec.template")
            return KindPods((RawPodSet("0", count, shape),))
        name = wrapped.get("kind")
        raise fields.error(
            join(where, "podSets"),
            f"is required for a wrapped {name} (the AppWrapper controller infers pod sets only "
            "for kinds it knows)",
        )

    def _template_paths(self, obj: Mapping[str, Any]) -> list[list[Path]]:
        """Per component, the paths (from the component) of its pod sets' templates."""
        out: list[list[Path]] = []
        for component in get(obj, ("spec", "components")) or ():
            if not isinstance(component, Mapping):
                out.append([])
                continue
            declared = component.get("podSets") or ()
            if declared:
                paths = [parse_path(str((p or {}).get("path") or "")) for p in declared]
                out.append([p for p in paths if p is not None])
                continue
            wrapped, kind = _wrapped(component)
            if isinstance(kind, PodSetKind):
                out.append(_template_paths(kind, wrapped) or [])
            elif isinstance(kind, PodGroupKind):
                out.append([("template", "spec", "template")])
            else:
                out.append([])
        return out

    def selector_paths(self, obj: Mapping[str, Any]) -> dict[str, Path]:
        """Each pod set's entry in its component's ``podSetInfos`` (Kueue's way: the AppWrapper
        controller gives the wrapped pods what is there)."""
        out: dict[str, Path] = {}
        name = _name(obj)
        for i, paths in enumerate(self._template_paths(obj)):
            for j in range(len(paths)):
                out[f"{name}-{len(out)}"] = ("spec", "components", i, "podSetInfos", j)
        return out

    def run_ops(
        self,
        obj: Mapping[str, Any],
        selectors: Mapping[str, Mapping[str, str]],
        old_keys: Injected,
    ) -> Ops:
        ops = self.suspend_ops(obj, False)
        name, n = _name(obj), 0
        for i, paths in enumerate(self._template_paths(obj)):
            infos = []
            for j in range(len(paths)):
                current = get(obj, ("spec", "components", i, "podSetInfos", j)) or {}
                drop = injected_for(old_keys, f"{name}-{n}")
                selector = {k: v for k, v in (current.get("nodeSelector") or {}).items()
                            if k not in drop}  # fmt: skip
                selector.update(selectors.get(f"{name}-{n}", {}))
                infos.append({**current, "nodeSelector": selector})
                n += 1
            if infos:
                where = pointer(("spec", "components", i, "podSetInfos"))
                ops.append({"op": "add", "path": where, "value": infos})
        return ops

    def finished(self, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
        phase = (obj.get("status") or {}).get("phase")
        if phase == "Succeeded":
            return True
        return phase == "Failed" and not true_condition(obj, ("ResourcesDeployed",))


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "appwrapper")


def _wrapped(component: Mapping[str, Any]) -> tuple[Mapping[str, Any], Any]:
    from fleetshare.manifests.kinds import KINDS  # the registry holds this module's kind

    wrapped = component.get("template")
    if not isinstance(wrapped, Mapping):
        return {}, None
    return wrapped, KINDS.get(str(wrapped.get("kind")))


def _template_paths(kind: PodSetKind, wrapped: Mapping[str, Any]) -> list[Path] | None:
    """The wrapped object's pod templates, as paths from the component (None: a kind whose pod
    sets are not pod templates, a SparkApplication)."""
    if not isinstance(kind, SuspendedKind):
        return [("template",)]  # a Pod is its own template
    paths = []
    for path in kind.selector_paths(wrapped).values():
        if path[-1] != "spec":
            return None
        paths.append(("template", *path[:-1]))
    return paths


APPWRAPPER = AppWrapper()
__all__ = ["APPWRAPPER", "AppWrapper", "parse_path"]
