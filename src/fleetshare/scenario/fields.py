"""The fields of every format a scenario (and ``fleetshare policy import``) reads from other
systems, from the tables the importers decide by: Kueue objects, the Kueue keys of workload
manifests, SageMaker HyperPod documents. ``fleetshare policy fields`` prints them;
docs/fields.md is :func:`field_docs`'s text."""

from __future__ import annotations

from fleetshare.fields import FieldTable, markdown
from fleetshare.manifests.kueue_keys import KEYS
from fleetshare.policy import hyperpod_fields, kueue_fields

__all__ = ["SECTIONS", "field_docs"]

_KUEUE = (
    "Kueue objects (`kueue:` in a scenario, `fleetshare policy import kueue`): the kinds read, "
    "each kind's fields (v1beta1's and v1beta2's names alike), the controller Configuration, "
    "and the Kueue labels and annotations of workloads given as Kubernetes manifests "
    "(`manifests:`). *As Kueue* means as Kueue's API documentation and code behave."
)
_HYPERPOD = (
    "SageMaker HyperPod task governance documents (`hyperpod:` in a scenario, `fleetshare "
    "policy import hyperpod`), member by member of SageMaker's API model (botocore's "
    "`service-2.json`). *As HyperPod* means as the model's documentation of the member says. "
    "Bookkeeping is passed over without a note."
)

SECTIONS: tuple[tuple[str, str, tuple[FieldTable, ...]], ...] = (
    ("Kueue", _KUEUE, (*kueue_fields.TABLES, KEYS)),
    ("SageMaker HyperPod", _HYPERPOD, hyperpod_fields.TABLES),
)
"""(heading, introduction, tables) of docs/fields.md, in order."""


def field_docs() -> str:
    """docs/fields.md."""
    return markdown(SECTIONS)
