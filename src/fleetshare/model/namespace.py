"""Namespaces: the labels a namespace carries, which namespace selectors match."""

from __future__ import annotations

from collections.abc import Mapping

NAME_LABEL = "kubernetes.io/metadata.name"
"""The label Kubernetes sets on every namespace: its name."""

NamespaceLabels = Mapping[str, Mapping[str, str]]
"""Labels by namespace name (as declared: :func:`labels_of` adds :data:`NAME_LABEL`)."""


def labels_of(namespace: str, declared: NamespaceLabels) -> dict[str, str]:
    """The labels of ``namespace``: those declared for it, and its name under
    :data:`NAME_LABEL`, which Kubernetes sets on every namespace (one not declared has only
    that one)."""
    return {**declared.get(namespace, {}), NAME_LABEL: namespace}
